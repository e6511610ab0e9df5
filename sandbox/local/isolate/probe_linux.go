//go:build linux

package isolate

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

func probe() Capabilities {
	c := Capabilities{Root: os.Geteuid() == 0}

	c.UserNamespaces = Capability{Name: "user namespaces", Available: true,
		Description: "clone(CLONE_NEWUSER) and mounts inside it work"}
	if err := tryUserNamespace(); err != nil {
		c.UserNamespaces.Available = false
		c.UserNamespaces.Description = fmt.Sprintf("not usable (%v); enable unprivileged user namespaces (sysctl user.max_user_namespaces, kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for this binary)", err)
	}

	c.LandlockABI = landlockABI()
	c.Landlock = Capability{Name: "landlock", Available: c.LandlockABI > 0,
		Description: fmt.Sprintf("ABI %d", c.LandlockABI)}
	if c.LandlockABI == 0 {
		c.Landlock.Description = "not available; needs Linux 5.13+ with lsm=...,landlock on the kernel command line"
	} else if c.LandlockABI < 9 {
		c.Landlock.Description += " (does not mediate connect() to pathname unix sockets, so the landlock tier refuses every unix socket but socketpairs with seccomp; ABI 9 does)"
	}

	c.Seccomp = Capability{Name: "seccomp", Available: true, Description: "seccomp filters (SECCOMP_RET_ERRNO) available"}
	act := uint32(unix.SECCOMP_RET_ERRNO)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&act))); e != 0 {
		c.Seccomp = Capability{Name: "seccomp", Description: fmt.Sprintf("not available (%v); needs CONFIG_SECCOMP_FILTER", e)}
	}

	c.bases = findCgroupBases()
	c.mech = probeMechanisms(c.bases)
	cgLine := func(name, mech, v1file, v2file, fallback string) Capability {
		switch mech {
		case "v1":
			return Capability{Name: name, Available: true, Description: "cgroup v1 " + v1file}
		case "v2":
			return Capability{Name: name, Available: true, Description: "cgroup v2 " + v2file}
		}
		return Capability{Name: name, Description: "no writable cgroup (run as root, or delegate a cgroup v2 subtree with this controller); fallback: " + fallback}
	}
	c.MemoryCgroup = cgLine("memory cgroup", c.mech.memory, "memory.limit_in_bytes", "memory.max", "RLIMIT_AS per process")
	c.PidsCgroup = cgLine("pids cgroup", c.mech.pids, "pids.max", "pids.max", "RLIMIT_NPROC")
	c.Freezer = cgLine("freezer", c.mech.freezer, "freezer.state", "cgroup.freeze", "SIGSTOP/SIGCONT of every process")

	c.Best = driver.TierProcess
	if c.Can(driver.TierLandlock) == nil {
		c.Best = driver.TierLandlock
	}
	if c.Can(driver.TierNamespace) == nil {
		c.Best = driver.TierNamespace
	}
	return c
}

// tryUserNamespace starts /bin/true in a new user namespace whose child
// makes / private: Go's forkExec does that mount for Unshareflags
// CLONE_NEWNS and fails the start if the kernel refuses it.
func tryUserNamespace() error {
	bin := "/bin/true"
	if _, err := os.Stat(bin); err != nil {
		bin = "/usr/bin/true"
	}
	id := os.Geteuid()
	gid := os.Getegid()
	if id == 0 {
		id, gid = 65534, 65534 // probe as the sandboxes will run: unprivileged
	}
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:   syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
		Unshareflags: syscall.CLONE_NEWNS,
		UidMappings:  []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
		GidMappings:  []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		Credential:   &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	return cmd.Run()
}
