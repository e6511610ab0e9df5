package server

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// A search's system calls on the files it reads (openat2 in openBeneath,
// fstat, read, close) are raw: they do not enter the Go runtime's
// blocking-system-call path. On that path a call that spans one tick of
// the runtime's monitor (sysmon, from 20 µs) while every P is busy has its
// P taken and handed to another thread, which wakes, finds nothing to do
// and sleeps again, and each such hand-off sets the monitor back to waking
// every 20 µs. A search makes ~46,000 of these calls over the Go tree (4
// per file) on every P at once: measured in a namespace sandbox on the
// shared 2-core machine (load 12-19, builds alternated, 4 rounds of 10
// searches), the agent's CPU per search went from 1.07-1.11x ripgrep's to
// 0.99-1.07x.
//
// What a raw call gives up is the hand-off of its P while it blocks; these
// do not block for long: the files are regular (the walk takes only
// DT_REG entries, and the open is O_NONBLOCK, so a FIFO swapped in between
// the walk and the open opens at once and its read returns at once; a
// file that fills the read buffer is fstat'ed and read only if regular,
// but a smaller one is read without fstat, so such a swapped-in FIFO's
// waiting bytes are read and searched like a file's), and a
// regular file's read waits at most for the disk. A search runs with one P
// more than its workers (widenProcs), so while every worker waits in such
// a call the agent still serves its other requests.

func searchRead(fd int, p []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func searchClose(fd int) error {
	// close(2) is not retried on EINTR: the descriptor is gone either way.
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}

// searchDup duplicates fd, close-on-exec.
func searchDup(fd int) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func searchFstat(fd int, st *unix.Stat_t) error {
	if _, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0); e != 0 {
		return e
	}
	return nil
}
