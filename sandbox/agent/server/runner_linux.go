//go:build linux

package server

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/linuxrunner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
)

// defaultRunner is the Linux runner: process groups, rlimits, reaping.
func defaultRunner() runner.Runner { return linuxrunner.New(linuxrunner.Options{}) }

// isExecutable reports whether p is a regular file with an execute bit
// (lookPathIn's test of each PATH entry). The statx is raw, as the
// runner's other calls on a command's way to its start: os.Stat is a
// system call the runtime is told of, and the first one after the agent
// was idle wakes the runtime's monitor thread (sysmon), which then polls
// every 20 µs while the agent works (a futex wake-up on the request's
// path, and 4-9 thread switches per command after it). It cannot block
// for long: PATH entries are the sandbox's own local directories.
func isExecutable(p string) bool {
	path, err := unix.BytePtrFromString(p)
	if err != nil {
		return false
	}
	var st unix.Statx_t
	at := unix.AT_FDCWD
	_, _, e := syscall.RawSyscall6(unix.SYS_STATX, uintptr(at), uintptr(unsafe.Pointer(path)), 0, unix.STATX_TYPE|unix.STATX_MODE, uintptr(unsafe.Pointer(&st)), 0)
	return e == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0
}
