//go:build linux

package local

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// stream is one end of the agent's socketpair (the host's, or the agent's
// own), read and written with raw system calls on the non-blocking socket
// through the runtime's poller.
//
// Why not the *os.File itself: os.File's Read and Write enter the runtime's
// blocking-syscall path (entersyscall), and the first such call after the
// process was idle wakes the runtime's monitor thread (sysmon), which then
// polls every 20 µs until the process idles again. A small request is
// exactly that pattern on both sides, once per round trip. A read or write
// of a non-blocking socket never blocks, so the blocking-syscall path buys
// nothing here; waiting is left to the poller (RawConn.Read and Write park
// the goroutine until the socket is ready). Measured on the 2-core machine
// with 30,000 pings (the smallest request): per round trip, context
// switches 2.2 → 1.2 in the agent and 4.0 → 2.8 on the host, CPU time
// 26 → 19 µs in the agent and 37 → 27 µs on the host.
//
// It is a syscall.Conn (the same RawConn), so the egress tunnel still
// splices into and out of the stream.
type stream struct {
	f  *os.File
	rc syscall.RawConn
}

// newStream wraps f, a non-blocking socket; f itself is returned when its
// descriptor cannot be reached (it never happens for a socketpair end).
func newStream(f *os.File) io.ReadWriteCloser {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	return &stream{f: f, rc: rc}
}

func (s *stream) Read(p []byte) (n int, err error) {
	if len(p) == 0 {
		return 0, nil
	}
	rerr := s.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
			switch e {
			case 0:
				if n = int(r); n == 0 {
					err = io.EOF
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // park until the socket is readable
			default:
				err = e
				return true
			}
		}
	})
	if rerr != nil {
		return 0, rerr // closed (or a deadline passed)
	}
	return n, err
}

// Write writes all of p, parking whenever the socket's buffer is full, as
// os.File's Write does.
func (s *stream) Write(p []byte) (n int, err error) {
	rerr := s.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			rest := p[n:]
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
			switch e {
			case 0:
				if r == 0 {
					err = io.ErrShortWrite // never for a socket; no endless loop either
					return true
				}
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // park until the socket is writable
			default:
				err = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	return n, err
}

// Close closes the socket; a Read or Write parked on it returns an error.
func (s *stream) Close() error { return s.f.Close() }

// SyscallConn returns the socket's RawConn (syscall.Conn), for splice.
func (s *stream) SyscallConn() (syscall.RawConn, error) { return s.rc, nil }
