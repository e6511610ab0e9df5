package server

import "golang.org/x/sys/unix"

// The Linux-only system calls of the workspace, named here so that the
// files that use them build on other systems too (sys_other.go, and
// sys_windows.go without Unix).

// oPath opens a directory only as a handle to walk from, with no read
// permission needed (sys_unix.go's ancestor check, within).
const oPath = unix.O_PATH

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
