package isolate

import (
	"fmt"
	"sync"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Capability is one thing this machine can or cannot enforce, as
// `sandboxkit doctor` prints it.
type Capability struct {
	Name        string // "user namespaces", "landlock", ...
	Available   bool
	Description string // one line: what was found, or what is missing and how to get it
}

// Capabilities is what Probe found on this machine.
type Capabilities struct {
	Root           bool // the host process runs as root (sandbox uids are then allocated)
	UserNamespaces Capability
	Landlock       Capability
	LandlockABI    int
	Seccomp        Capability
	MemoryCgroup   Capability
	PidsCgroup     Capability
	Freezer        Capability
	// Best is the strongest tier this package can build here, TierProcess
	// when it can build none.
	Best driver.Tier

	bases cgroupBases
	mech  cgroupMechanisms
}

// cgroupBases are the directories of this process's own cgroups in which a
// child cgroup could be created, found from /proc/self/mountinfo and
// /proc/self/cgroup. Sandboxes are nested below the host process's own
// cgroup, so they stay inside whatever limits the host already has.
type cgroupBases struct {
	v1 map[string]string // "memory", "pids", "freezer" -> own cgroup dir
	v2 string            // own cgroup dir in the unified hierarchy
}

// cgroupMechanisms says which hierarchy can enforce each control ("" none).
type cgroupMechanisms struct {
	memory, pids, freezer, kill string // "v1", "v2" or ""
}

// List returns the capabilities in doctor's order.
func (c Capabilities) List() []Capability {
	return []Capability{c.UserNamespaces, c.Landlock, c.Seccomp, c.MemoryCgroup, c.PidsCgroup, c.Freezer}
}

// Can reports whether tier t can be built here, and if not, why.
func (c Capabilities) Can(t driver.Tier) error {
	switch t {
	case driver.TierNamespace:
		if !c.UserNamespaces.Available {
			return fmt.Errorf("the namespace tier needs user namespaces: %s", c.UserNamespaces.Description)
		}
		if !c.Seccomp.Available {
			return fmt.Errorf("the namespace tier needs seccomp: %s", c.Seccomp.Description)
		}
	case driver.TierLandlock:
		if !c.Landlock.Available {
			return fmt.Errorf("the landlock tier needs Landlock: %s", c.Landlock.Description)
		}
		if !c.Seccomp.Available {
			return fmt.Errorf("the landlock tier needs seccomp: %s", c.Seccomp.Description)
		}
	default:
		return fmt.Errorf("tier %s is not built by package isolate", t)
	}
	return nil
}

var (
	probeOnce sync.Once
	probed    Capabilities
)

// Probe reports what this machine can enforce, found by trying each
// mechanism rather than by reading configuration (a sysctl can allow user
// namespaces in which AppArmor then denies every mount). The result is
// computed once per process.
func Probe() Capabilities {
	probeOnce.Do(func() { probed = probe() })
	return probed
}
