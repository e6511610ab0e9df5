package tunnel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
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
// connecting to the proxy. With local set, the socket's own address must
// be local, the proxy's listener: a program in the sandbox cannot have a
// socket bound there while the agent listens, so one it made and handed
// over itself (through Docker's handoff socket, which anything in the
// container can reach) is refused.
func handedSocket(fd int, local netip.AddrPort) (*net.TCPConn, error) {
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
	if local.IsValid() {
		sa, err := unix.Getsockname(fd)
		var got netip.AddrPort
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			got = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
		case *unix.SockaddrInet6:
			got = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
		}
		if err != nil || got != local {
			return nil, fmt.Errorf("handed-over socket is bound to %v, not the proxy's %v: it was not accepted by the proxy", got, local)
		}
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

// The host's I/O on a handed-over socket must not depend on the socket's
// O_NONBLOCK flag: it belongs to the open file description, which the
// sender shares (the agent keeps its copy; in Docker, a program that
// reached the handoff socket keeps the whole socket) and can clear at any
// time. The reviewer's reproduction: cleared after the host's FileConn,
// the host's next read blocked in the kernel, past its header deadline,
// and Close waited for it (internal/poll), so Sandbox.Close hung with a
// host thread pinned per connection. recv and send with MSG_DONTWAIT never
// block whatever the flag says, and RawConn parks them on the poller with
// the deadlines honoured. No splice into or out of the socket: a splice
// follows the flag.

// Read reads with recv(MSG_DONTWAIT).
func (c *handedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	rc, err := c.TCPConn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, rerr = unix.Recvfrom(int(fd), p, unix.MSG_DONTWAIT)
			if rerr == unix.EINTR {
				continue
			}
			return rerr != unix.EAGAIN
		}
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p with send(MSG_DONTWAIT|MSG_NOSIGNAL).
func (c *handedConn) Write(p []byte) (int, error) {
	rc, err := c.TCPConn.SyscallConn()
	if err != nil {
		return 0, err
	}
	sent := 0
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for sent < len(p) {
			n, e := unix.SendmsgN(int(fd), p[sent:], nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			switch e {
			case nil:
				sent += n
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				werr = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return sent, err
}

// ReadFrom copies r into the socket through Write (TCPConn's would splice),
// in steps of handedCopySize: io.Copy's own 32 KiB made a 10 MB download
// 320 recv/send pairs, most of what the egress benchmark's http case
// spent above the host's curl once the host stopped splicing (1.43-1.62x
// on an idle machine, against issue 20's 1.5x).
func (c *handedConn) ReadFrom(r io.Reader) (int64, error) {
	bp := handedCopyBufs.Get().(*[]byte)
	defer handedCopyBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{c}, r, *bp)
}

// handedCopySize is ReadFrom's step: the most a loopback TCP receive
// returns at once here.
const handedCopySize = 256 << 10

var handedCopyBufs = sync.Pool{New: func() any { b := make([]byte, handedCopySize); return &b }}

// WriteTo copies the socket to w through Read.
func (c *handedConn) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, struct{ io.Reader }{c})
}

// shutdown wakes whatever still waits in the kernel on the socket.
func (c *handedConn) shutdown() {
	if rc, err := c.TCPConn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
}
