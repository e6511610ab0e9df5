//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

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

// buildDropPrivileges adds the steps that remove every capability for
// good. With CAP_SETPCAP (havePcap: the namespace tier) they also empty the
// bounding set and lock the securebits; without it (the landlock tier) there
// is nothing to lock: the process has no capabilities and no_new_privs
// stops setuid binaries from adding any. Each step is a raw syscall of the
// one thread that execs: Go's own wrappers use AllThreadsSyscall, which
// fails where cgo is linked.
func buildDropPrivileges(p *program, havePcap bool) {
	if havePcap {
		p.sys("PR_SET_SECUREBITS", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, lockedSecurebits)
		last := lastCap()
		for c := 0; c <= last; c++ {
			// EINVAL: a capability this kernel does not know.
			p.sys(fmt.Sprintf("PR_CAPBSET_DROP %d", c), unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c)).with(opIgnoreErr)
		}
	}
	p.sys("PR_CAP_AMBIENT_CLEAR_ALL", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{}
	p.sys("capset", unix.SYS_CAPSET, addr(p, hdr), uintptr(unsafe.Pointer(&data[0])))
	p.keep = append(p.keep, data)
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

// Rlimits applies the limits that hold for the agent as well as for every
// command to the calling process: RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE
// 0 and, for Pids, RLIMIT_NPROC (with AgentTaskReserve added; it counts
// every process of the uid). The process tier calls it in its stage init;
// the isolating tiers' setup program sets the same ones. CPU time and the
// RLIMIT_AS fallback for memory are per command (see WrapCommand): a
// long-lived agent would exhaust a CPU limit, and a Go agent cannot run
// under RLIMIT_AS. Soft and hard limits are equal, so a sandboxed process
// cannot raise them.
func Rlimits(l driver.Limits) error {
	var errs []error
	for _, r := range rlimitsFor(l, true) {
		if err := syscall.Setrlimit(r.res, &syscall.Rlimit{Cur: r.v, Max: r.v}); err != nil {
			errs = append(errs, fmt.Errorf("isolate: %s=%d: %w", r.name, r.v, err))
		}
	}
	return errors.Join(errs...)
}

// rlimit is one resource limit to set.
type rlimit struct {
	name string
	res  int
	v    uint64
}

// rlimitsFor lists the rlimits of l; nproc says whether Pids falls back to
// RLIMIT_NPROC (no pids cgroup).
func rlimitsFor(l driver.Limits, nproc bool) []rlimit {
	out := []rlimit{{"RLIMIT_CORE", unix.RLIMIT_CORE, 0}}
	nofile := l.OpenFiles
	if nofile <= 0 {
		nofile = DefaultOpenFiles
	}
	out = append(out, rlimit{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, uint64(nofile)})
	if l.FileSizeBytes > 0 {
		out = append(out, rlimit{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, uint64(l.FileSizeBytes)})
	}
	if nproc && l.Pids > 0 {
		out = append(out, rlimit{"RLIMIT_NPROC", unix.RLIMIT_NPROC, uint64(l.Pids + AgentTaskReserve)})
	}
	return out
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
