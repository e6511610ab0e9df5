package docker

import (
	"context"
	"maps"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// EngineReport is what the engine a Driver would use says about itself,
// for diagnostics such as `sandboxkit doctor`.
type EngineReport struct {
	// Host names the engine and how it was chosen (a host, a context).
	Host string
	// Reachable is false when the engine did not answer; Err says why.
	Reachable bool
	Err       error
	// Version, API, OS, Arch and Cgroup are the engine's own facts.
	Version, API, OS, Arch, Cgroup string
	// Seccomp says whether the engine applies seccomp profiles.
	Seccomp bool
	// Runtimes are the OCI runtimes registered with the engine, each with
	// the tier a sandbox on it reports, sorted by name.
	Runtimes []RuntimeReport
	// DefaultRuntime is the engine's default runtime.
	DefaultRuntime string
	// Image is the driver's image and whether the engine has it.
	Image        string
	ImagePresent bool
}

// RuntimeReport is one runtime of the engine.
type RuntimeReport struct {
	Name string
	Tier driver.Tier
}

// Report asks the engine about itself. An unreachable engine is a report
// with Reachable false, not an error: the error is for a failed question
// to an engine that answered.
func (d *Driver) Report(ctx context.Context) (EngineReport, error) {
	r := EngineReport{Host: d.target.where, Image: d.s.image}
	f, err := d.facts(ctx)
	if err != nil {
		r.Err = err
		return r, nil
	}
	r.Reachable = true
	r.Version, r.API, r.OS, r.Arch, r.Cgroup, r.Seccomp = f.version, f.api, f.os, f.arch, f.cgroup, f.seccomp
	info, err := d.cli.Info(ctx)
	if err != nil {
		return r, d.engineError("asking the Docker engine for its configuration", err)
	}
	r.DefaultRuntime = info.DefaultRuntime
	for _, name := range slices.Sorted(maps.Keys(f.runtimes)) {
		r.Runtimes = append(r.Runtimes, RuntimeReport{Name: name, Tier: tierOf(name)})
	}
	_, err = d.cli.ImageInspect(ctx, d.s.image)
	switch {
	case err == nil:
		r.ImagePresent = true
	case cerrdefs.IsNotFound(err):
	default:
		return r, d.engineError("looking for the image "+d.s.image, err)
	}
	return r, nil
}

// tierOf is the tier a sandbox on runtime reports: gvisor for runsc and
// its variants (runsc-debug, ...), container for every other runtime.
func tierOf(runtime string) driver.Tier {
	if runtime == "runsc" || strings.HasPrefix(runtime, "runsc-") {
		return driver.TierGVisor
	}
	return driver.TierContainer
}
