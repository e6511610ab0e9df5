package docker

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
)

// LabelAgent marks the shared volumes that hold an agent binary.
const LabelAgent = "sandboxkit.agent"

// The agent reaches containers through a named volume per agent binary
// (sandboxkit-agent-<sha256 prefix>) that every sandbox mounts read-only at
// /.sandboxkit. Copying the binary into each container instead costs a
// CopyToContainer per sandbox, which the engine implements as a re-exec'd
// chrooted untar (~200 ms here); filling the volume once per engine and
// binary costs that once. The volume lives on the engine's machine, so this
// works with a remote DOCKER_HOST; it is filled with CopyToContainer through
// a helper container that is created, never started, and removed.

func agentVolumeName(a *agentBin) string { return "sandboxkit-agent-" + a.sum[:16] }

// agentVolume returns the name of a volume holding a, creating and filling
// it when the engine lacks it. It is checked once per Driver and binary.
func (d *Driver) agentVolume(ctx context.Context, image string, a *agentBin) (string, error) {
	name := agentVolumeName(a)
	d.mu.Lock()
	ready := d.volumes[name]
	d.mu.Unlock()
	if ready {
		return name, nil
	}
	d.volMu.Lock() // one filler per Driver; the engine serialises the rest
	defer d.volMu.Unlock()
	labels := map[string]string{LabelSandboxkit: "1", LabelAgent: a.sum}
	v, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels})
	if err != nil {
		return "", d.engineError("creating the agent volume", err)
	}
	if v.Labels[LabelAgent] != a.sum {
		// The engine made it, unlabelled, for a container that mounted it
		// after GC had removed it: label it (by recreating) so GC sees it.
		if d.cli.VolumeRemove(ctx, name, false) == nil {
			if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels}); err != nil {
				return "", d.engineError("creating the agent volume", err)
			}
		}
	}
	// The helper carries its creator like a sandbox, so that GC removes
	// one left by a crash and not one in use.
	helperLabels := d.creator().labels()
	maps.Copy(helperLabels, labels)
	helper, err := d.cli.ContainerCreate(ctx, &container.Config{
		Image: image, Entrypoint: []string{agentPath}, Labels: helperLabels,
	}, &container.HostConfig{
		NetworkMode: "none",
		Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: name, Target: agentDir}},
	}, nil, nil, "")
	if err != nil {
		return "", d.engineError("creating a helper container to fill the agent volume", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.cli.ContainerRemove(rctx, helper.ID, container.RemoveOptions{Force: true})
	}()
	st, err := d.cli.ContainerStatPath(ctx, helper.ID, agentPath)
	if err != nil || st.Size != a.size || st.Mode.Perm() != 0o555 {
		if err != nil && !cerrdefs.IsNotFound(err) {
			return "", d.engineError("checking the agent volume", err)
		}
		if err := d.cli.CopyToContainer(ctx, helper.ID, agentDir, bytes.NewReader(a.tar), container.CopyToContainerOptions{}); err != nil {
			return "", d.engineError(fmt.Sprintf("copying the agent into volume %s", name), err)
		}
	}
	d.mu.Lock()
	d.volumes[name] = true
	d.mu.Unlock()
	return name, nil
}

// forgetAgentVolume drops the belief that name is filled (e.g. after GC
// removed it under a running Driver).
func (d *Driver) forgetAgentVolume(name string) {
	d.mu.Lock()
	delete(d.volumes, name)
	d.mu.Unlock()
}
