package agent

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// hardenProcess protects the agent from the commands it starts, which run
// as its uid (root of a user namespace locally, the container's user in
// Docker):
//
//   - Undumpable. /proc/PID/fd, /proc/PID/environ and /proc/PID/mem of a
//     process of the same uid are open to it while the process is
//     dumpable. Through the agent's fds a command could write forged
//     protocol frames to the host (the stream is the agent's stdout in a
//     container, a socket locally) or into the exec-status pipe of the
//     next start; through mem it could rewrite the agent. Undumpable, each
//     of those takes CAP_SYS_PTRACE, which no sandbox has. Every execve
//     resets the flag, so it is set here, in the agent's own image, and
//     read back: a kernel that ignored it must not leave the agent open.
//   - No environment. The agent needs none (everything arrives in the
//     handshake; commands get the handshake's variables, never the
//     agent's), so whatever the image or launcher put there (an API key in
//     an image's ENV) is dropped before any command exists. The kernel's
//     copy in /proc/PID/environ stays, behind the flag above.
func hardenProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("making the agent undumpable: %w", err)
	}
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		return errors.Join(errors.New("the agent is still dumpable after PR_SET_DUMPABLE 0"), err)
	}
	os.Clearenv()
	return nil
}
