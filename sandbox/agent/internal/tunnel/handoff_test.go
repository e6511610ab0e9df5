//go:build linux

package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// handoffPair returns the host's and the agent's sides over a socketpair
// with connections handed over, as the client and the agent's proxy set
// them up when Hello.ProxyHandoff holds; hostErr receives why the host's
// read loop ended.
func handoffPair(t *testing.T) (host, agent *side, hostErr <-chan error) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "stream")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	errc := make(chan error, 1)
	host = &side{conn: conns[0], done: make(chan struct{})}
	host.tn = New(host.send, func(b []byte) error {
		return host.writeWith(func(w io.Writer) error { _, err := w.Write(b); return err })
	}, Addr("test"))
	host.tn.UseStream(conns[0], host.writeWith, Splicing{Send: true})
	go func() {
		defer close(host.done)
		r := wire.NewFrameReader(host.tn.HandoffReader(conns[0]))
		for {
			f, err := wire.ReadFrame(r)
			if err == nil {
				err = host.tn.Deliver(f)
			}
			if err != nil {
				host.tn.Shutdown()
				conns[0].Close()
				errc <- err
				return
			}
		}
	}()
	agent = newSide(t, conns[1], Splicing{Receive: true, HandOff: true})
	t.Cleanup(func() {
		conns[0].Close()
		conns[1].Close()
		<-host.done
		<-agent.done
	})
	return host, agent, errc
}

// TestHandoff: a connection handed over reaches the host as the program's
// socket itself, bytes flow both ways without the agent, the host's
// close frees the agent's slot, and no descriptor is left behind.
func TestHandoff(t *testing.T) {
	before := openFDs(t)
	host, agent, _ := handoffPair(t)
	program, accepted := tcpPair(t)
	var released atomic.Int32
	if !agent.tn.HandOff(7, accepted, func() { released.Add(1) }) {
		t.Fatal("the connection was not handed over")
	}
	accepted.Close() // the agent keeps no copy
	var hc net.Conn
	select {
	case hc = <-host.tn.accepted:
	case <-time.After(30 * time.Second):
		t.Fatal("the host did not get the connection")
	}
	if _, ok := hc.(*handedConn); !ok {
		t.Fatalf("the host got a %T, want the handed-over socket", hc)
	}
	if _, ok := hc.(io.ReaderFrom); !ok {
		t.Error("the handed-over connection is no io.ReaderFrom: the proxy's copy could not splice into it")
	}
	program.Write([]byte("GET / HTTP/1.1\r\n"))
	buf := make([]byte, 64)
	n, err := hc.Read(buf)
	if err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("the host read %q, %v", buf[:n], err)
	}
	hc.Write([]byte("HTTP/1.1 200 OK\r\n"))
	hc.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(program)
	if err != nil || string(got) != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("the program read %q, %v", got, err)
	}
	hc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for released.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if released.Load() != 1 {
		t.Fatal("the host's close did not free the agent's slot")
	}
	program.Close()
	host.conn.Close()
	<-host.done
	<-agent.done
	waitFDs(t, before)
}

// TestHandoffEndsWithStream: when the stream ends, the host's handed-over
// connections end too (the program sees its connection close) and the
// agent frees every slot, as carried connections do.
func TestHandoffEndsWithStream(t *testing.T) {
	host, agent, _ := handoffPair(t)
	program, accepted := tcpPair(t)
	var released atomic.Int32
	if !agent.tn.HandOff(1, accepted, func() { released.Add(1) }) {
		t.Fatal("the connection was not handed over")
	}
	accepted.Close()
	<-host.tn.accepted
	agent.conn.Close()
	<-host.done
	<-agent.done
	program.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := program.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the program read %d bytes after the stream ended, want its connection closed", n)
	}
	if released.Load() != 1 {
		t.Errorf("%d slots freed when the stream ended, want 1", released.Load())
	}
}

// hostileHandoff sends a ConnHandoff frame with fd attached (fd < 0: none)
// as a hostile agent would.
func hostileHandoff(t *testing.T, agent *side, id uint32, fd int) {
	t.Helper()
	rc, err := agent.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	hdr := wire.AppendHeader(nil, id, wire.FrameConnHandoff, 0)
	if fd < 0 {
		agent.conn.Write(hdr)
		return
	}
	if err := sendHandoff(rc, hdr, fd); err != nil {
		t.Fatal(err)
	}
}

// TestHandoffHostile: the host takes only a connected TCP socket with its
// frame. Anything else a hostile agent hands over — a pipe, a unix
// socket, a listening socket, a frame without a descriptor, descriptors
// without frames, more connections than the host allows — ends the
// stream as a protocol error, and every descriptor it sent is closed.
func TestHandoffHostile(t *testing.T) {
	tcpListener := func(t *testing.T) int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		rc, _ := l.(*net.TCPListener).SyscallConn()
		var fd int
		rc.Control(func(f uintptr) { fd = int(f) })
		return fd
	}
	for _, tc := range []struct {
		name string
		send func(t *testing.T, agent *side)
		want string
	}{
		{"pipe", func(t *testing.T, agent *side) {
			r, w, _ := os.Pipe()
			defer r.Close()
			defer w.Close()
			hostileHandoff(t, agent, 1, int(r.Fd()))
		}, "not a stream socket"},
		{"unix socket", func(t *testing.T, agent *side) {
			fds, _ := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			defer syscall.Close(fds[0])
			defer syscall.Close(fds[1])
			hostileHandoff(t, agent, 1, fds[0])
		}, "not a TCP socket"},
		{"listening socket", func(t *testing.T, agent *side) {
			hostileHandoff(t, agent, 1, tcpListener(t))
		}, "listening socket"},
		{"no descriptor", func(t *testing.T, agent *side) {
			hostileHandoff(t, agent, 1, -1)
		}, "without a descriptor"},
		{"descriptors without frames", func(t *testing.T, agent *side) {
			rc, _ := agent.conn.SyscallConn()
			for i := 0; i <= maxPendingFDs; i++ {
				// A frame of another type with a descriptor attached.
				if err := sendHandoff(rc, wire.AppendHeader(nil, 1, wire.FrameConnEOF, 0), tcpListener(t)); err != nil {
					t.Fatal(err)
				}
			}
		}, "without their ConnHandoff frames"},
		{"too many connections", func(t *testing.T, agent *side) {
			for id := uint32(1); id <= maxTunnelConns+1; id++ {
				_, accepted := tcpPair(t)
				hostileHandoff(t, agent, id, fdOf(accepted))
			}
		}, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := openFDs(t)
			host, agent, hostErr := handoffPair(t)
			tc.send(t, agent)
			var err error
			select {
			case err = <-hostErr:
			case <-time.After(30 * time.Second):
				t.Fatal("the host's read loop went on")
			}
			if !errors.Is(err, wire.ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the host's read loop ended with %v, want a protocol error saying %q", err, tc.want)
			}
			agent.conn.Close()
			<-host.done
			<-agent.done
			for range host.tn.accepted {
			}
			waitFDs(t, before+openTestFDs(tc.name))
		})
	}
}

// openTestFDs is how many descriptors a case's own sockets keep open
// until the test ends (closed at its cleanup).
func openTestFDs(name string) int {
	switch name {
	case "listening socket":
		return 1
	case "descriptors without frames":
		return maxPendingFDs + 1
	case "too many connections":
		return 2 * (maxTunnelConns + 1)
	}
	return 0
}

func fdOf(c *net.TCPConn) int {
	rc, _ := c.SyscallConn()
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// TestHandoffSocket: where the stream carries no descriptors, the agent
// hands connections over a unix socket the host serves (a container's
// bind-mounted socket); the host's close still frees the agent's slot
// over the stream. Whatever else connects to that socket and sends
// anything but a ConnHandoff frame with a TCP socket is cut off, and the
// stream and the agent's handoffs go on.
func TestHandoffSocket(t *testing.T) {
	host, agent := pair(t) // the stream itself hands nothing over
	path := t.TempDir() + "/s"
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go host.tn.ServeHandoff(l)

	// A program in the sandbox connects and sends a ConnData frame, then
	// a handoff of a pipe: each connection is cut, the stream is not.
	for _, junk := range []func(c *net.UnixConn){
		func(c *net.UnixConn) { c.Write(wire.AppendFrame(nil, 5, wire.FrameConnData, []byte("x"))) },
		func(c *net.UnixConn) {
			r, w, _ := os.Pipe()
			defer r.Close()
			defer w.Close()
			rc, _ := c.SyscallConn()
			sendHandoff(rc, wire.AppendHeader(nil, 5, wire.FrameConnHandoff, 0), int(r.Fd()))
		},
	} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		junk(c.(*net.UnixConn))
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("the host kept a handoff socket connection that sent junk: read %v, want EOF", err)
		}
		c.Close()
	}

	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	agent.tn.UseHandoffSocket(c.(*net.UnixConn))
	program, accepted := tcpPair(t)
	var released atomic.Int32
	if !agent.tn.HandOff(9, accepted, func() { released.Add(1) }) {
		t.Fatal("the connection was not handed over the socket")
	}
	accepted.Close()
	var hc net.Conn
	select {
	case hc = <-host.tn.accepted:
	case <-time.After(30 * time.Second):
		t.Fatal("the host did not get the connection")
	}
	program.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(hc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("the host read %q, %v", buf, err)
	}
	hc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for released.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if released.Load() != 1 {
		t.Fatal("the host's close did not free the agent's slot")
	}
	select {
	case <-host.done:
		t.Fatal("the stream ended")
	default:
	}
}
