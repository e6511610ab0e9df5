//go:build linux

package local

import (
	"errors"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/linuxrunner"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local/isolate"
)

// errNoFreezer says the tier has no freezer; Pause falls back to SIGSTOP.
var errNoFreezer = errors.New("no freezer")

// isoSpec is the isolation part of the launch configuration: the plan
// that Prepare decided, which Enter applies.
type isoSpec = isolate.Spec

// isoHost is the host side of an isolating tier.
type isoHost struct {
	h *isolate.Handle
}

// bestTier probes the machine (once per process) and prepares the
// strongest tier it can build; why explains a weaker result.
func bestTier(cfg driver.Config, disposable bool) (driver.Tier, *isoHost, string) {
	caps := isolate.Probe()
	var why string
	for _, t := range []driver.Tier{driver.TierNamespace, driver.TierLandlock} {
		if err := caps.Can(t); err != nil {
			if why == "" {
				why = err.Error()
			}
			continue
		}
		h, err := prepareIsolation(cfg, t, disposable)
		if err != nil {
			if why == "" {
				why = err.Error()
			}
			continue
		}
		return t, h, why
	}
	return driver.TierProcess, nil, why
}

func isolateProbe() isolate.Capabilities { return isolate.Probe() }

// prepareIsolation prepares tier t; disposable says the workspace is a
// temporary one of this sandbox's, removed at Close.
func prepareIsolation(cfg driver.Config, t driver.Tier, disposable bool) (*isoHost, error) {
	ws := cfg.Workspace
	h, err := isolate.Prepare(isolate.Spec{
		Tier:          t,
		ID:            cfg.ID,
		HostWorkspace: ws,
		// Nobody shares a temporary workspace, and nobody needs its
		// files back (isolate.Spec.DisposableWorkspace).
		DisposableWorkspace: disposable,
		Network:             cfg.Network,
		Limits:              cfg.Limits,
	})
	if err != nil {
		return nil, err
	}
	return &isoHost{h: h}, nil
}

func (i *isoHost) spec(ws string) isoSpec            { return i.h.Spec() }
func (i *isoHost) report(ws string) driver.Isolation { return i.h.Report() }
func (i *isoHost) tmpDir() string                    { return i.h.TmpDir() }
func (i *isoHost) freeze() error                     { return i.h.Freeze() }
func (i *isoHost) thaw() error                       { return i.h.Thaw() }
func (i *isoHost) killAll()                          { _ = i.h.KillAll() }
func (i *isoHost) save() error                       { return i.h.SaveWorkspace() }
func (i *isoHost) cleanup()                          { _ = i.h.Cleanup() }

func enterIsolation(cfg launchConfig, raw []byte) error { return isolate.Enter(cfg.Iso, raw) }

// completeIsolation checks the boundary; processesReady is closed when the
// agent may start processes (isolate.CompleteAsync), and cgroup, when not
// nil, is the cgroup every command must be in before it runs (the
// commands cgroup, taken by RunStage before anything else).
func completeIsolation(cfg launchConfig, commands *isolate.CommandsCgroup) (processesReady <-chan struct{}, cgroup *linuxrunner.Cgroup, err error) {
	if !cfg.Isolated {
		return nil, nil, nil
	}
	if processesReady, err = isolate.CompleteAsync(cfg.Iso); err != nil {
		return nil, nil, err
	}
	if err = commands.Check(cfg.Iso); err != nil {
		return nil, nil, err
	}
	if commands != nil {
		cgroup = &linuxrunner.Cgroup{Tasks: commands.Tasks, Current: commands.Current, Max: commands.Max, Spawn: commands.Spawn}
	}
	return processesReady, cgroup, nil
}
