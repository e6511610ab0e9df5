//go:build unix && !linux

package server

import "golang.org/x/sys/unix"

// The stand-ins for sys_linux.go on other Unix systems (macOS, the BSDs).
// The agent does not serve there (hardenProcess refuses); these keep the
// package building, and each one fails or falls back rather than pretend.

// oPath: without O_PATH, the ancestor check opens directories for reading
// (it then fails, and answers "not an ancestor", where a directory is not
// readable).
const oPath = unix.O_RDONLY

// openPathFD returns -1: there is no openat2, so searches open through
// os.Root.
func openPathFD(dir string) int { return -1 }

// openBeneath is never reached (openPathFD gives no descriptor); it
// answers ENOSYS, which sends the caller to os.Root.
func openBeneath(rootFD int, rel string) (int, error) { return -1, unix.ENOSYS }

// readRaw reads fd (sys_linux.go), through the runtime here. It returns the
// count, or -errno.
func readRaw(fd uintptr, buf []byte) int {
	n, err := unix.Read(int(fd), buf)
	if errno, ok := err.(unix.Errno); ok {
		return -int(errno)
	}
	return n
}

// nonblocking: pumpRaw is Linux only.
func nonblocking(fd uintptr) bool { return false }
