package server

import (
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
// RESOLVE_NO_SYMLINKS sends a path through a link back to os.Root. The
// call is raw and the path is copied to the stack when it is short, with
// no allocation: search opens every file with it (why raw:
// search_linux.go).
func openBeneath(rootFD int, rel string) (int, error) {
	var buf [512]byte
	var p *byte
	if len(rel) < len(buf) && strings.IndexByte(rel, 0) < 0 {
		copy(buf[:], rel) // the rest of buf is the terminating NUL
		p = &buf[0]
	} else {
		var err error
		if p, err = unix.BytePtrFromString(rel); err != nil {
			return -1, err
		}
	}
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_OPENAT2, uintptr(rootFD), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(r), nil
	}
}
