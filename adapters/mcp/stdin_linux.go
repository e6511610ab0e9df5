package mcp

import (
	"os"
	"strconv"
	"syscall"
)

// pollableStdin returns standard input as a file Go's poller waits on, so
// that a LineTransport reads it in Read, without a goroutine hand-off per
// message, and Close still interrupts a blocked read. It returns nil when
// standard input is not a pipe or cannot be reopened; the transport then
// reads it from a goroutine of its own.
func pollableStdin() *os.File { return reopenPipe(syscall.Stdin) }

// reopenPipe opens the pipe behind fd anew, through /proc/self/fd. The new
// open file description is this process's alone, so making it non-blocking
// (which the poller needs) changes nothing for fd itself or for whoever
// shares fd's description: the client that made the pipe, or a child that
// inherited it. (Setting O_NONBLOCK on fd's own description would: a
// program reading the same pipe or terminal after this one, e.g. the shell,
// would get EAGAIN.) Sockets cannot be reopened this way and are not
// tried: a client that gives its server a socket as standard input (libuv,
// so Node.js clients, do) gets the goroutine.
func reopenPipe(fd int) *os.File {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil
	}
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer; os.OpenFile then registers it with the poller.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	if f.SetReadDeadline(noDeadline) != nil {
		f.Close()
		return nil
	}
	return f
}
