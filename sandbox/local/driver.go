package local

import "github.com/sandboxkit/sandboxkit/sandbox/driver"

// Driver starts local sandboxes. The zero value is not usable: call New.
type Driver struct {
	exe  string
	tier driver.Tier // exact tier to build; 0: the best available
}

// Option configures a Driver.
type Option func(*Driver)

// WithExecutable sets the binary re-executed as the sandbox's agent. The
// default is the running binary (/proc/self/exe), which must import this
// package (directly or through package sandbox) so its init hook runs.
func WithExecutable(path string) Option { return func(d *Driver) { d.exe = path } }

// WithTier makes the driver build exactly tier t (TierLandlock or
// TierProcess; the caller must still allow it with sandbox.AllowWeaker)
// instead of the best tier this machine offers, failing with
// ISOLATION_UNAVAILABLE where t cannot be built. It exists to run a weaker
// tier's tests, or to reproduce its behaviour, on a machine that has a
// stronger one.
func WithTier(t driver.Tier) Option { return func(d *Driver) { d.tier = t } }

// New returns the local backend.
func New(opts ...Option) *Driver {
	d := &Driver{exe: "/proc/self/exe"}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Name returns "local".
func (d *Driver) Name() string { return "local" }
