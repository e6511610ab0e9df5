package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// ensureImage makes sure ref is on the engine, pulling it as policy allows,
// and returns its image id.
func (d *Driver) ensureImage(ctx context.Context, ref string, policy PullPolicy, progress func(string)) (string, error) {
	if policy != PullAlways {
		ins, err := d.cli.ImageInspect(ctx, ref)
		if err == nil {
			return ins.ID, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return "", d.engineError(fmt.Sprintf("looking up image %q", ref), err)
		}
		if policy == PullNever {
			return "", driver.Errorf(driver.CodeNotFound, err, fmt.Sprintf(
				"image %q is not on the Docker engine and pulling is off; build, load or import it first (docker build / docker load / docker import), or allow pulls",
				ref))
		}
	}
	if err := d.pull(ctx, ref, progress); err != nil {
		return "", err
	}
	ins, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", d.engineError(fmt.Sprintf("looking up image %q after pulling it", ref), err)
	}
	return ins.ID, nil
}

// pullMessage is one line of the engine's pull progress stream.
type pullMessage struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Progress string `json:"progress"`
	Error    string `json:"error"`
}

// pull pulls ref, reporting each layer's state changes (not every byte
// count) to progress. A pull the engine cannot do — no registry reachable,
// unknown repository, no credentials — is NOT_FOUND with the engine's reason.
func (d *Driver) pull(ctx context.Context, ref string, progress func(string)) error {
	report := func(string) {}
	if progress != nil {
		report = progress
	}
	report(fmt.Sprintf("pulling image %s", ref))
	cannot := func(err error) error {
		if client.IsErrConnectionFailed(err) {
			return d.engineError(fmt.Sprintf("pulling image %q", ref), err)
		}
		return driver.Errorf(driver.CodeNotFound, err, fmt.Sprintf(
			"image %q is not on the Docker engine and cannot be pulled; check the name, the registry's reachability and `docker login`, or load the image by hand (docker load / docker import)",
			ref))
	}
	rc, err := d.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return cannot(err)
	}
	defer rc.Close()
	last := map[string]string{}
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m pullMessage
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.Error != "" {
			return cannot(fmt.Errorf("%s", m.Error))
		}
		if m.Status == "" || last[m.ID] == m.Status {
			continue
		}
		last[m.ID] = m.Status
		line := m.Status
		if m.ID != "" {
			line = m.ID + ": " + m.Status
		}
		report(strings.TrimSpace(line))
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		return cannot(err)
	}
	if err := ctx.Err(); err != nil {
		return d.engineError(fmt.Sprintf("pulling image %q", ref), err)
	}
	report(fmt.Sprintf("pulled image %s", ref))
	return nil
}
