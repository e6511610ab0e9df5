package server

import "golang.org/x/sys/unix"

// The Linux-only system calls of the agent server, named here so that the
// files that use them build on other systems too (sys_other.go), where the
// agent does not serve (hardenProcess refuses) but its package is built
// into every program that uses a sandbox.

// rlimitRTTIME is the resource that carries a command's tag (tags.go).
const rlimitRTTIME = unix.RLIMIT_RTTIME

// oPath opens a directory only as a handle to walk from, with no read
// permission needed (fs.go's ancestor check).
const oPath = unix.O_PATH

// prlimit reads and sets the rlimits of process pid (0: the agent).
func prlimit(pid int, resource int, newLimit *unix.Rlimit, old *unix.Rlimit) error {
	return unix.Prlimit(pid, resource, newLimit, old)
}

// setChildSubreaper makes the agent the parent of the orphans of the
// processes it starts, so that they stay in its tree to be found and
// killed.
func setChildSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// openPathFD returns an O_PATH descriptor of dir for openBeneath, or -1
// (searches then open through os.Root).
func openPathFD(dir string) int {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// openBeneath opens rel below the directory rootFD for reading in one
// system call: openat2 with RESOLVE_BENEATH confines the whole path, and
// RESOLVE_NO_SYMLINKS sends a path through a link back to os.Root.
func openBeneath(rootFD int, rel string) (int, error) {
	return unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}
