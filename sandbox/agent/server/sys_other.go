//go:build unix && !linux

package server

import "golang.org/x/sys/unix"

// The stand-ins for sys_linux.go on other Unix systems (macOS, the BSDs).
// The agent does not serve there (hardenProcess refuses); these keep the
// package building, and each one fails or falls back rather than pretend.

// rlimitRTTIME names no resource here: prlimit refuses every call, so
// tagging is off (tagger.off) and nothing is read with it.
const rlimitRTTIME = -1

// oPath: without O_PATH, the ancestor check opens directories for reading
// (it then fails, and answers "not an ancestor", where a directory is not
// readable).
const oPath = unix.O_RDONLY

// prlimit refuses: these systems cannot set another process's rlimits, so
// a limit asked for is refused rather than silently not applied.
func prlimit(pid int, resource int, newLimit *unix.Rlimit, old *unix.Rlimit) error {
	return unix.ENOSYS
}

// setChildSubreaper refuses: there is no subreaper here.
func setChildSubreaper() error { return unix.ENOSYS }

// openPathFD returns -1: there is no openat2, so searches open through
// os.Root.
func openPathFD(dir string) int { return -1 }

// openBeneath is never reached (openPathFD gives no descriptor); it
// answers ENOSYS, which sends the caller to os.Root.
func openBeneath(rootFD int, rel string) (int, error) { return -1, unix.ENOSYS }
