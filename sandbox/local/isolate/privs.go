package isolate

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Securebits (linux/securebits.h). NOROOT stops uid 0 from gaining
// capabilities at execve; NO_SETUID_FIXUP stops setuid(0) from giving them
// back; the LOCKED bits make both permanent for every descendant.
const (
	secbitNoroot             = 1 << 0
	secbitNorootLocked       = 1 << 1
	secbitNoSetuidFixup      = 1 << 2
	secbitNoSetuidFixupLock  = 1 << 3
	secbitKeepCapsLocked     = 1 << 5
	secbitNoCapAmbientRaise  = 1 << 6
	secbitNoCapAmbientLocked = 1 << 7
	lockedSecurebits         = secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLock |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
)

// dropPrivileges removes every capability from the calling thread for good
// and sets no_new_privs. With CAP_SETPCAP (namespace tier, or root) it also
// empties the bounding set and locks the securebits; without it (an
// unprivileged landlock tier) there is nothing to lock: the process has no
// capabilities and no_new_privs stops setuid binaries from adding any.
//
// Each step is a raw syscall on the current thread: Go's own wrappers use
// AllThreadsSyscall, which fails where cgo is linked.
func dropPrivileges() error {
	havePcap := hasCap(unix.CAP_SETPCAP)
	if havePcap {
		if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, lockedSecurebits, 0, 0, 0, 0); e != 0 {
			return fmt.Errorf("isolate: PR_SET_SECUREBITS: %w", e)
		}
		last := lastCap()
		for c := 0; c <= last; c++ {
			if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0, 0); e != 0 && e != unix.EINVAL {
				return fmt.Errorf("isolate: PR_CAPBSET_DROP %d: %w", c, e)
			}
		}
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("isolate: PR_CAP_AMBIENT_CLEAR_ALL: %w", e)
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("isolate: PR_SET_NO_NEW_PRIVS: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("isolate: capset: %w", err)
	}
	return nil
}

// switchIdentity makes the calling thread uid/gid with no supplementary
// groups (the landlock tier started as root).
func switchIdentity(uid, gid int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("isolate: setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("isolate: setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("isolate: setresuid: %w", e)
	}
	return nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

func hasCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// Rlimits applies the limits that hold for the agent as well as for every
// command to the calling process: RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE
// 0 and, for Pids, RLIMIT_NPROC (with AgentTaskReserve added; it counts
// every process of the uid). The process tier calls it in its stage init;
// Enter calls it itself. CPU time and the RLIMIT_AS fallback for memory are
// per command (see WrapCommand): a long-lived agent would exhaust a CPU
// limit, and a Go agent cannot run under RLIMIT_AS. Soft and hard limits
// are equal, so a sandboxed process cannot raise them.
func Rlimits(l driver.Limits) error { return applyRlimits(l, true) }

// applyRlimits sets the rlimits; nproc says whether Pids falls back to
// RLIMIT_NPROC (no pids cgroup).
func applyRlimits(l driver.Limits, nproc bool) error {
	set := func(name string, res int, v uint64) error {
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("isolate: %s=%d: %w", name, v, err)
		}
		return nil
	}
	var errs []error
	errs = append(errs, set("RLIMIT_CORE", unix.RLIMIT_CORE, 0))
	nofile := l.OpenFiles
	if nofile <= 0 {
		nofile = DefaultOpenFiles
	}
	errs = append(errs, set("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, uint64(nofile)))
	if l.FileSizeBytes > 0 {
		errs = append(errs, set("RLIMIT_FSIZE", unix.RLIMIT_FSIZE, uint64(l.FileSizeBytes)))
	}
	if nproc && l.Pids > 0 {
		errs = append(errs, set("RLIMIT_NPROC", unix.RLIMIT_NPROC, uint64(l.Pids+AgentTaskReserve)))
	}
	return errors.Join(errs...)
}

// WrapCommand returns the argv that starts argv with the per-command
// limits: RLIMIT_CPU for Limits.CPUSeconds (SIGKILL at the limit) and,
// where no memory cgroup enforces Limits.MemoryBytes (spec.Plan nil as in
// the process tier, or Plan.MemoryCgroup false), RLIMIT_AS. They cannot be
// set on the agent, which would use up a CPU limit over its lifetime and
// cannot run under RLIMIT_AS as a Go program, and setting them with
// prlimit after the start races with the command's first fork (seen under
// load). So the command starts under /bin/sh, which sets both limits and
// execs it: one extra exec, only when such a limit is asked for. Children
// the command forks inherit the limits. Without per-command limits argv is
// returned unchanged.
func WrapCommand(spec Spec, argv []string) []string {
	l := spec.Limits
	var script []string
	if l.CPUSeconds > 0 {
		script = append(script, fmt.Sprintf("ulimit -t %d || exit 126", l.CPUSeconds))
	}
	if l.MemoryBytes > 0 && (spec.Plan == nil || !spec.Plan.MemoryCgroup) {
		script = append(script, fmt.Sprintf("ulimit -v %d || exit 126", max(l.MemoryBytes/1024, 1)))
	}
	if len(script) == 0 {
		return argv
	}
	script = append(script, `exec "$0" "$@"`)
	return append([]string{"/bin/sh", "-c", strings.Join(script, "; ")}, argv...)
}
