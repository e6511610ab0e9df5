package docker

import (
	"context"
	"errors"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
)

// GCOptions selects the leftovers GC removes.
type GCOptions struct {
	// Owner, when set, limits GC to containers labelled with this owner.
	Owner string
	// OlderThan spares containers created less than this long ago, so that
	// a GC run does not kill sandboxes that another process is using right
	// now. Zero removes every matching container.
	OlderThan time.Duration
}

// GC removes containers left by this backend (label sandboxkit=1, e.g.
// after a host crash or a kill -9), running or not, and the agent volumes
// no container uses (a later Start refills them). It returns the names of the containers it
// removed. It is what `sandboxkit gc` runs.
func GC(ctx context.Context, o GCOptions, opts ...Option) ([]string, error) {
	d := New(opts...)
	defer d.Close()
	if d.cliErr != nil {
		return nil, d.engineError("connecting to the Docker engine", d.cliErr)
	}
	args := filters.NewArgs(filters.Arg("label", LabelSandboxkit+"=1"))
	if o.Owner != "" {
		args.Add("label", LabelOwner+"="+o.Owner)
	}
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, d.engineError("listing sandbox containers", err)
	}
	cutoff := time.Now().Add(-o.OlderThan)
	var removed []string
	var errs []error
	for _, c := range list {
		if o.OlderThan > 0 && time.Unix(c.Created, 0).After(cutoff) {
			continue
		}
		if c.State == "paused" {
			_ = d.cli.ContainerUnpause(ctx, c.ID)
		}
		err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			errs = append(errs, d.engineError("removing container "+c.ID, err))
			continue
		}
		name := c.ID
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		removed = append(removed, name)
	}
	// Agent volumes are shared by every owner's sandboxes, so they go
	// whatever the Owner, but only when unused: the engine refuses to
	// remove a mounted volume, and Start refills a missing one.
	errs = append(errs, d.removeUnusedVolumes(ctx, cutoff, o.OlderThan > 0)...)
	return removed, errors.Join(errs...)
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
