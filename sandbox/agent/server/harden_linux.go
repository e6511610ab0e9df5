package server

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

// checkConfinement verifies, before the agent serves, that the kernel's
// open refuses what the agent's confinement relies on it to refuse: the
// file API (os.Root) walks paths with openat(O_NOFOLLOW|O_DIRECTORY) and
// counts on it to fail on a symbolic link, and search opens with openat2
// RESOLVE_BENEATH where the kernel has it. Under gVisor's runsc of Debian
// 12 (release 20221219) the first followed a link to "/" and the file API
// returned /etc/passwd. A kernel that follows is refused here, so the
// agent never serves files with a confinement it has not seen hold. It
// makes a link to "/" in a fresh directory of scratch (/tmp when empty);
// where none can be made the check is skipped with a log line (the
// backends give the agent a writable private /tmp, or name one in
// ServeOptions.ScratchDir).
func checkConfinement(logf func(string, ...any), scratch string) error {
	if scratch == "" {
		scratch = "/tmp"
	}
	dir, err := os.MkdirTemp(scratch, ".sandboxkit-confine-")
	if err != nil {
		logf("agent: cannot check the kernel's confinement of opens (no writable %s): %v", scratch, err)
		return nil
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink("/", dir+"/out"); err != nil {
		logf("agent: cannot check the kernel's confinement of opens: %v", err)
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("checking confinement: %w", err)
	}
	defer root.Close()
	if f, err := root.Open("out/etc"); err == nil {
		f.Close()
		return errors.New("this kernel's openat follows a symbolic link despite O_NOFOLLOW|O_DIRECTORY, so the workspace's confinement (os.Root) does not hold: the agent does not serve here; use another runtime or kernel")
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("checking confinement: %w", err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, "out/etc", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
	if err == nil {
		unix.Close(fd)
		return errors.New("this kernel's openat2 ignores RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, which search relies on: the agent does not serve here; use another runtime or kernel")
	}
	return nil
}
