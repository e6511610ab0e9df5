package tunnel

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The Linux half of moving a connection's bytes with splice(2): between a
// socket and a kernel pipe, and between the pipe and the agent's stream,
// the kernel passes page references instead of copying the bytes out to
// the process and back (Linux 6.5 and later splice into TCP and unix
// sockets without a copy too). The pipes are the tunnel's own and
// non-blocking: the tunnel knows how much each holds, so a wait is only
// ever for the socket or the stream, through the runtime's poller
// (syscall.RawConn), which also honours the socket's deadlines.

const spliceSupported = true

// refuseSplice makes every splice fail as unsupported (tests of the
// fallback: a kernel or filter without it).
var refuseSplice atomic.Bool

// newPipe makes a non-blocking pipe of at least size bytes.
func newPipe(size int) (*kpipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	if got, err := unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, size); err != nil || got < size {
		// Over fs.pipe-max-size or the user's pipe-user-pages limits
		// (many connections at once): the caller copies instead.
		unix.Close(fds[0])
		unix.Close(fds[1])
		if err == nil {
			err = errors.New("pipe smaller than asked")
		}
		return nil, err
	}
	return &kpipe{r: fdRef{fd: fds[0]}, w: fdRef{fd: fds[1]}}, nil
}

func closeFD(fd int) { unix.Close(fd) }

// growSendBuffer raises the stream's send buffer (a unix socket's is
// what a sender may have in flight) to size, where the system's limit
// (net.core.wmem_max) allows.
func growSendBuffer(rc syscall.RawConn, size int) {
	rc.Control(func(fd uintptr) {
		if cur, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF); err == nil && cur < size {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, size)
		}
	})
}

// splice moves up to n bytes from in to out; neither blocks (the sockets
// are non-blocking, the pipes too, and SPLICE_F_NONBLOCK).
func splice(in, out, n int) (int, error) {
	if refuseSplice.Load() {
		return 0, unix.EINVAL
	}
	m, err := unix.Splice(in, nil, out, nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	if err != nil {
		return 0, err
	}
	return int(m), nil
}

// spliceFrom moves up to n bytes from the socket behind src into the empty
// pipe end pw, waiting until the socket has some; 0 bytes means the
// socket's end. (The pipe is empty, so a full pipe cannot be why a splice
// waits.)
func spliceFrom(src syscall.RawConn, pw int, n int) (int, error) {
	var m int
	var serr error
	err := src.Read(func(fd uintptr) bool {
		m, serr = splice(int(fd), pw, n)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, err
	}
	return m, nil
}

// waitReadable waits until the socket behind rc has bytes to read or has
// ended (a peek, which consumes nothing).
func waitReadable(rc syscall.RawConn) error {
	var one [1]byte
	var perr error
	err := rc.Read(func(fd uintptr) bool {
		_, _, perr = unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return perr != unix.EAGAIN && perr != unix.EINTR
	})
	if err != nil {
		return err
	}
	if perr != nil && !errors.Is(perr, unix.ECONNRESET) {
		return perr
	}
	return nil // bytes, the end, or a reset the splice reports
}

// spliceTo moves exactly n bytes, already in the pipe end pr, to the
// socket or stream behind dst, waiting while it is full. It returns how
// many moved.
func spliceTo(dst syscall.RawConn, pr int, n int) (int, error) {
	moved := 0
	var serr error
	err := dst.Write(func(fd uintptr) bool {
		for moved < n {
			var m int
			m, serr = splice(pr, int(fd), n-moved)
			if serr == unix.EINTR {
				continue
			}
			if serr != nil {
				return serr != unix.EAGAIN
			}
			if m == 0 {
				serr = errors.New("splice moved nothing")
				return true
			}
			moved += m
		}
		return true
	})
	if err == nil {
		err = serr
	}
	return moved, err
}

// spliceFill moves up to n bytes from the stream behind src into the pipe
// end pw, waiting for the stream's bytes but not for room in the pipe: it
// returns fewer than n when the pipe is full (its slots hold a piece of a
// page each, so what fits depends on how the bytes arrived). The stream
// holds at least n more bytes (one frame's payload), so a splice that
// cannot move any while the stream has bytes queued is a full pipe.
func spliceFill(src syscall.RawConn, pw int, n int) (int, error) {
	moved := 0
	var serr error
	err := src.Read(func(fd uintptr) bool {
		for moved < n {
			var m int
			m, serr = splice(int(fd), pw, n-moved)
			switch {
			case serr == unix.EINTR:
				continue
			case serr == unix.EAGAIN:
				serr = nil
				if q, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil && q > 0 {
					return true // bytes waiting: the pipe is full
				}
				return false // wait for the stream
			case serr != nil:
				return true
			case m == 0:
				serr = io.ErrUnexpectedEOF // the stream ended inside a frame
				return true
			}
			moved += m
		}
		return true
	})
	if err == nil {
		err = serr
	}
	return moved, err
}

// readStream reads exactly len(b) bytes from the stream behind rc, waiting
// for them; io.EOF when the stream ended before the first.
func readStream(rc syscall.RawConn, b []byte) error {
	got := 0
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		for got < len(b) {
			n, err := unix.Read(int(fd), b[got:])
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return false
			case err != nil:
				rerr = err
				return true
			case n == 0:
				rerr = io.EOF
				if got > 0 {
					rerr = io.ErrUnexpectedEOF
				}
				return true
			}
			got += n
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	return err
}

// pipeWrite writes as much of b as the pipe end pw takes now.
func pipeWrite(pw int, b []byte) int {
	n, err := unix.Write(pw, b)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// pipeRead reads into b from the pipe end pr, which holds bytes.
func pipeRead(pr int, b []byte) (int, error) {
	for {
		n, err := unix.Read(pr, b)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// unsupported reports whether a splice failed because the kernel or the
// file cannot splice (or a sandbox's seccomp filter refuses it), not
// because the transfer failed: the caller copies instead.
func unsupported(err error) bool {
	return errors.Is(err, errors.ErrUnsupported) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) ||
		errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP)
}
