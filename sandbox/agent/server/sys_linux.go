package server

import (
	"strings"
	"syscall"
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

// readRaw reads a non-blocking descriptor without telling the scheduler:
// a read that cannot block needs no hand-off of the P, and the first
// system call the runtime is told of after the agent was idle wakes its
// monitor thread (sysmon), which then polls every 20 µs while the agent
// works: a warm command's agent made 17 context switches, 8 of them with
// that monitor kept asleep. It returns the count, or -errno.
func readRaw(fd uintptr, buf []byte) int {
	if len(buf) == 0 {
		return 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if e != 0 {
		return -int(e)
	}
	return int(n)
}

// nonblocking reports whether fd is in non-blocking mode (readRaw must
// never block the agent's only P in a read).
func nonblocking(fd uintptr) bool {
	fl, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	return e == 0 && fl&syscall.O_NONBLOCK != 0
}
