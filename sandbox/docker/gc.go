package docker

import (
	"context"
	"errors"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
)

// GCOptions selects the leftovers GC removes.
type GCOptions struct {
	// Owner, when set, limits GC to containers labelled with this owner
	// (sandbox.WithOwner; `sandboxkit mcp` labels its sandboxes
	// "sandboxkit-mcp" unless told otherwise with --owner).
	Owner string
	// OlderThan spares containers created less than this long ago. Zero
	// spares none.
	OlderThan time.Duration
	// All also removes the sandboxes GC cannot prove to be leftovers:
	// those whose creating process still runs, those made on another
	// machine that shares the engine, and those without creator labels
	// (made by an older sandboxkit). Without it GC removes only containers
	// whose creator is gone, and stopped ones.
	All bool
}

// GCReport says what GC did.
type GCReport struct {
	// Removed names the containers removed.
	Removed []string
	// Kept lists the matching containers GC left alone, each with the
	// reason (GCOptions.All removes them).
	Kept []KeptContainer
}

// KeptContainer is a sandbox container GC did not remove.
type KeptContainer struct {
	Name   string
	Owner  string
	Reason string
}

// GC removes containers left by this backend (label sandboxkit=1) whose
// creating process is gone (e.g. it was killed with SIGKILL or its machine
// rebooted), running or not, and the agent volumes no container uses (a
// later Start refills them). A container records the machine, boot and
// process (pid and start time) that made it: GC removes it when that
// process no longer runs, and leaves the containers of live programs and of
// other machines alone unless GCOptions.All says otherwise. It is what
// `sandboxkit gc` runs.
func GC(ctx context.Context, o GCOptions, opts ...Option) (GCReport, error) {
	var rep GCReport
	d := New(opts...)
	defer d.Close()
	if d.cliErr != nil {
		return rep, d.engineError("connecting to the Docker engine", d.cliErr)
	}
	args := filters.NewArgs(filters.Arg("label", LabelSandboxkit+"=1"))
	if o.Owner != "" {
		args.Add("label", LabelOwner+"="+o.Owner)
	}
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return rep, d.engineError("listing sandbox containers", err)
	}
	cutoff := time.Now().Add(-o.OlderThan)
	var errs []error
	for _, c := range list {
		if o.OlderThan > 0 && time.Unix(c.Created, 0).After(cutoff) {
			continue
		}
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		stopped := c.State == "exited" || c.State == "dead"
		if !o.All && !stopped {
			reason := ""
			switch stateOf(c.Labels) {
			case creatorAlive:
				reason = "its creator (pid " + c.Labels[LabelCreatorPID] + ") still runs"
			case creatorElse:
				if h := c.Labels[LabelCreatorHost]; h != "" {
					reason = "made on another machine (" + h + ")"
				} else {
					reason = "no creator labels (made by an older sandboxkit)"
				}
			case creatorUnknown:
				reason = "this system cannot tell whether its creator still runs"
			}
			if reason != "" {
				rep.Kept = append(rep.Kept, KeptContainer{Name: name, Owner: c.Labels[LabelOwner], Reason: reason})
				continue
			}
		}
		if c.State == "paused" {
			_ = d.cli.ContainerUnpause(ctx, c.ID)
		}
		err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			errs = append(errs, d.engineError("removing container "+c.ID, err))
			continue
		}
		d.removeHandoffDir(c)
		rep.Removed = append(rep.Removed, name)
	}
	// Agent volumes are shared by every owner's sandboxes, so they go
	// whatever the Owner, but only when unused: the engine refuses to
	// remove a mounted volume, and Start refills a missing one.
	errs = append(errs, d.removeUnusedVolumes(ctx, cutoff, o.OlderThan > 0)...)
	return rep, errors.Join(errs...)
}

func (d *Driver) removeUnusedVolumes(ctx context.Context, cutoff time.Time, byAge bool) []error {
	vols, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelSandboxkit+"=1"), filters.Arg("dangling", "true"))})
	if err != nil {
		return []error{d.engineError("listing sandboxkit volumes", err)}
	}
	var errs []error
	for _, v := range vols.Volumes {
		if created, err := time.Parse(time.RFC3339, v.CreatedAt); byAge && err == nil && created.After(cutoff) {
			continue
		}
		// In use since the listing: the engine refuses with a conflict.
		if err := d.cli.VolumeRemove(ctx, v.Name, false); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			errs = append(errs, d.engineError("removing volume "+v.Name, err))
		}
	}
	return errs
}
