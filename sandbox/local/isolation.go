package local

import (
	"errors"
	"syscall"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// errNoFreezer says the tier has no freezer; Pause falls back to SIGSTOP.
var errNoFreezer = errors.New("no freezer")

// isoSpec is the isolation part of the launch configuration.
type isoSpec struct{}

// isoHost is the host side of an isolating tier.
type isoHost struct{}

func bestTier(cfg driver.Config) (driver.Tier, *isoHost, string) {
	return driver.TierProcess, nil, "kernel isolation (namespace and landlock tiers) is not available in this build"
}

func prepareIsolation(cfg driver.Config, t driver.Tier) (*isoHost, error) {
	return nil, errors.New("not available")
}

func (h *isoHost) spec(ws string) isoSpec { return isoSpec{} }
func (h *isoHost) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
func (h *isoHost) started(pid int) error                { return nil }
func (h *isoHost) report(ws string) driver.Isolation    { return driver.Isolation{} }
func (h *isoHost) freeze() error                        { return errNoFreezer }
func (h *isoHost) thaw() error                          { return errNoFreezer }
func (h *isoHost) killAll()                             {}
func (h *isoHost) cleanup()                             {}
func enterIsolation(cfg launchConfig, raw []byte) error { return errors.New("not available") }
func completeIsolation(cfg launchConfig) error          { return nil }
