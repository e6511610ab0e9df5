package server

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ProbeSyscalls tries system calls that a sandbox's seccomp allowlist must
// refuse and prints one line per call: "NAME=refused" or "NAME=allowed".
// A backend runs it at creation to measure, rather than assume, that the
// runtime applies the allowlist it reports (gVisor's runsc, for one,
// ignores the container's seccomp profile unless told --oci-seccomp). It
// returns the exit status.
func ProbeSyscalls() int {
	// Calls that cannot succeed or change anything, so that only the
	// errno tells a filter (EPERM, the allowlist's answer) from a kernel
	// that ran the call. ptrace of a pid that cannot exist: ESRCH where
	// ptrace is allowed. (PTRACE_TRACEME would be clearer, and would make
	// this process the agent's tracee, stopped at its next signal.)
	_, _, errno := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, 0x7fffffff, 0, 0, 0, 0)
	report("ptrace", errno != unix.EPERM && errno != unix.ENOSYS)
	// io_uring_setup with no parameters: EFAULT where the call is allowed,
	// EPERM or ENOSYS where it is filtered or absent.
	_, _, errno = unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
	report("io_uring_setup", errno != unix.EPERM && errno != unix.ENOSYS)
	return 0
}

func report(name string, allowed bool) {
	verdict := "refused"
	if allowed {
		verdict = "allowed"
	}
	fmt.Fprintf(os.Stdout, "%s=%s\n", name, verdict)
}
