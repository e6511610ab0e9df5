//go:build !linux

package isolate

import (
	"os"
	"runtime"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// probe reports that nothing of this package works here: user and mount
// namespaces, Landlock, seccomp and cgroups are Linux's.
func probe() Capabilities {
	why := "not available on " + runtime.GOOS + ": the local backend isolates only on Linux; use the Docker backend (sandbox/docker)"
	c := Capabilities{Root: os.Geteuid() == 0, Best: driver.TierProcess}
	c.UserNamespaces = Capability{Name: "user namespaces", Description: why}
	c.Landlock = Capability{Name: "landlock", Description: why}
	c.Seccomp = Capability{Name: "seccomp", Description: why}
	c.MemoryCgroup = Capability{Name: "memory cgroup", Description: why}
	c.PidsCgroup = Capability{Name: "pids cgroup", Description: why}
	c.Freezer = Capability{Name: "freezer", Description: why}
	return c
}
