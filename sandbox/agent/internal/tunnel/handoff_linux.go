package tunnel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Linux half of handing a connection's socket over (handoff.go): the
// agent sends the descriptor with a frame's bytes (SCM_RIGHTS) on the
// stream, a unix socket; the host reads the stream with recvmsg and keeps
// what comes with the bytes.

const handoffSupported = true

// fdsPerRead is the most descriptors one read of the stream takes: the
// agent sends one per frame, and the kernel ends a read after the bytes a
// descriptor came with, so one read never brings two. More (a hostile
// agent's) do not fit the control buffer and the kernel closes them
// (MSG_CTRUNC).
const fdsPerRead = 1

// rightsSpace is the size of a control buffer for fdsPerRead descriptors.
var rightsSpace = unix.CmsgSpace(4 * fdsPerRead)

// isUnixStream reports whether stream is a unix socket: only those carry
// descriptors.
func isUnixStream(rc syscall.RawConn) bool {
	ok := false
	rc.Control(func(fd uintptr) {
		d, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		ok = err == nil && d == unix.AF_UNIX
	})
	return ok
}

// recvStream reads the stream into p with recvmsg, and returns with the
// bytes the descriptors that came with them. The system call is made
// raw, as the local backend's stream reads (sandbox/local/stream.go):
// a read that waits is parked on the poller, never blocked in the
// kernel, so the runtime's blocking-syscall path buys nothing and costs
// a wake-up of its monitor thread after each idle spell.
func recvStream(rc syscall.RawConn, p, oob []byte) (n int, fds []int, err error) {
	if len(p) == 0 {
		return 0, nil, nil
	}
	iov := syscall.Iovec{Base: &p[0]}
	iov.SetLen(len(p))
	var oobn int
	rerr := rc.Read(func(fd uintptr) bool {
		for {
			msg := syscall.Msghdr{Iov: &iov, Iovlen: 1, Control: &oob[0]}
			msg.SetControllen(len(oob))
			r, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), syscall.MSG_CMSG_CLOEXEC)
			switch e {
			case 0:
				n, oobn = int(r), int(msg.Controllen)
				if n == 0 && oobn == 0 {
					err = io.EOF
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			default:
				err = e
				return true
			}
		}
	})
	if rerr != nil {
		return 0, nil, rerr
	}
	if oobn > 0 {
		fds = parseRights(oob[:oobn])
	}
	return n, fds, err
}

// parseRights returns the descriptors of the SCM_RIGHTS messages in oob
// (closing nothing: the caller owns them).
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// sendHandoff writes one frame's bytes (hdr) to the stream behind rc with
// the descriptor fd attached to them.
func sendHandoff(rc syscall.RawConn, hdr []byte, fd int) error {
	rights := unix.UnixRights(fd)
	sent := 0
	var serr error
	err := rc.Write(func(sfd uintptr) bool {
		for sent < len(hdr) {
			var n int
			var e error
			if sent == 0 {
				n, e = unix.SendmsgN(int(sfd), hdr, rights, nil, unix.MSG_NOSIGNAL)
			} else {
				n, e = unix.Write(int(sfd), hdr[sent:])
			}
			switch {
			case e == unix.EINTR:
				continue
			case e == unix.EAGAIN:
				return false
			case e != nil:
				serr = e
				return true
			}
			sent += n
		}
		return true
	})
	if err == nil {
		err = serr
	}
	return err
}

// handedSocket checks that fd, a descriptor the agent handed over, is a
// connected TCP socket (what the agent's proxy accepts), and returns it
// as a connection of the host's (the descriptor is closed either way).
// Anything else the agent sends — a listening socket, a unix socket, a
// file — is refused: the host treats only what a program could make by
// connecting to the proxy.
func handedSocket(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "handed-over egress connection")
	defer f.Close()
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_STREAM {
		return nil, fmt.Errorf("handed-over descriptor is not a stream socket")
	}
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil || (dom != unix.AF_INET && dom != unix.AF_INET6) {
		return nil, fmt.Errorf("handed-over descriptor is not a TCP socket")
	}
	if l, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || l != 0 {
		return nil, fmt.Errorf("handed-over descriptor is a listening socket")
	}
	nc, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return nil, errors.New("handed-over descriptor is not a TCP connection")
	}
	return tc, nil
}
