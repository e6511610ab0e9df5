//go:build linux

package tunnel

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// side is one end of a tunnel over a real unix socketpair, with the read
// loop the agent's server and client run.
type side struct {
	tn   *Tunnel
	conn *net.UnixConn
	wmu  sync.Mutex
	done chan struct{}
}

func newSide(t *testing.T, conn *net.UnixConn, how Splicing) *side {
	s := &side{conn: conn, done: make(chan struct{})}
	s.tn = New(s.send, func(b []byte) error { return s.writeWith(func(w io.Writer) error { _, err := w.Write(b); return err }) }, Addr("test"))
	s.tn.UseStream(conn, s.writeWith, how)
	go func() {
		defer close(s.done)
		r := wire.NewFrameReader(conn)
		for {
			f, err := s.tn.ReadFrame(r)
			if err == nil {
				err = s.tn.Deliver(f)
			}
			if err != nil {
				s.tn.Shutdown()
				conn.Close()
				return
			}
		}
	}()
	return s
}

func (s *side) send(id uint32, ft wire.FrameType, p []byte) error {
	return s.writeWith(func(w io.Writer) error { return wire.WriteFrame(w, id, ft, p) })
}

func (s *side) writeWith(fn func(io.Writer) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := fn(s.conn); err != nil {
		s.conn.Close()
		return err
	}
	return nil
}

// pair returns the host's and the agent's sides over a socketpair, as the
// client and the agent's proxy set them up (the host splices what it
// sends, the agent receives into pipes).
func pair(t *testing.T) (host, agent *side) {
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
	host = newSide(t, conns[0], Splicing{Send: true})
	agent = newSide(t, conns[1], Splicing{Receive: true})
	t.Cleanup(func() {
		conns[0].Close()
		conns[1].Close()
		<-host.done
		<-agent.done
	})
	return host, agent
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// openConn opens connection id on the agent's side and returns both ends.
func openConn(t *testing.T, host, agent *side, id uint32) (hc, ac *Conn) {
	t.Helper()
	ac, err := agent.tn.Add(id, Addr("program"))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.tn.Send(id, wire.FrameConnOpen, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-host.tn.accepted:
		hc = c.(*Conn)
	case <-time.After(30 * time.Second):
		t.Fatal("the host did not see the connection")
	}
	return hc, ac
}

// download sends data from a destination socket through the host's end
// (ReadFrom, as the egress proxy's copy does) and returns what reaches
// the program's socket through the agent's end (WriteTo, as the agent's
// relay does); slow makes the program read in small bites with pauses.
func download(t *testing.T, host, agent *side, id uint32, data []byte, slow bool) []byte {
	t.Helper()
	hc, ac := openConn(t, host, agent, id)
	dest, destPeer := tcpPair(t)
	prog, progPeer := tcpPair(t)
	go func() {
		destPeer.Write(data)
		destPeer.CloseWrite()
	}()
	go func() {
		if _, err := hc.ReadFrom(dest); err == nil { // as the egress proxy does: a splice
			hc.CloseWrite()
		}
	}()
	go func() {
		if _, err := io.Copy(prog, ac); err == nil {
			prog.CloseWrite()
		}
	}()
	defer func() {
		// As the proxy and the relay do when both directions ended.
		for _, c := range []net.Conn{hc, ac, dest, destPeer, prog, progPeer} {
			c.Close()
		}
	}()
	progPeer.SetReadDeadline(time.Now().Add(60 * time.Second))
	if !slow {
		got, err := io.ReadAll(progPeer)
		if err != nil {
			t.Fatalf("the program's read: %v", err)
		}
		return got
	}
	var got []byte
	buf := make([]byte, 4096)
	for i := 0; ; i++ {
		n, err := progPeer.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("the program's read: %v", err)
		}
		if i%64 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// TestSplicedDownload: a download spliced through the host's end and the
// agent's pipe arrives intact, also when the program reads slowly and
// the pipe fills (then the rest of a frame waits in memory, behind the
// pipe's bytes), and no descriptor is left once the connection closed.
func TestSplicedDownload(t *testing.T) {
	data := make([]byte, 8<<20+12345)
	rand.Read(data)
	for _, tc := range []struct {
		name string
		pipe int
		slow bool
	}{
		{"fast", windowToAgent, false},
		{"slow reader", windowToAgent, true},
		{"small pipe", 16 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := openFDs(t)
			defer func(n int) { receivePipeSize = n }(receivePipeSize)
			receivePipeSize = tc.pipe
			host, agent := pair(t)
			got := download(t, host, agent, 1, data, tc.slow)
			if !bytes.Equal(got, data) {
				t.Fatalf("the program got %d bytes, want the destination's %d (first difference at %d)", len(got), len(data), firstDiff(got, data))
			}
			if tc.pipe == windowToAgent && agent.tn.Get(1) != nil && agent.tn.Get(1).in0 == nil {
				t.Error("the agent's connection has no pipe")
			}
			host.conn.Close()
			<-host.done
			<-agent.done
			waitFDs(t, before)
		})
	}
}

// TestPipeReadAndWriteTo: bytes in a connection's pipe reach a reader
// that is not a socket (Read, and WriteTo into a buffer) in order.
func TestPipeReadAndWriteTo(t *testing.T) {
	host, agent := pair(t)
	data := make([]byte, 3<<20)
	rand.Read(data)
	for id, viaWriteTo := range []bool{false, true} {
		hc, ac := openConn(t, host, agent, uint32(id+1))
		if ac.in0 == nil {
			t.Fatal("no pipe")
		}
		go func() {
			hc.Write(data)
			hc.CloseWrite()
		}()
		var got []byte
		var err error
		if viaWriteTo {
			var b bytes.Buffer
			_, err = ac.WriteTo(&b)
			got = b.Bytes()
		} else {
			got, err = io.ReadAll(struct{ io.Reader }{ac})
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("WriteTo %v: %d bytes, %v; want the %d sent (first difference at %d)", viaWriteTo, len(got), err, len(data), firstDiff(got, data))
		}
		ac.Close()
		hc.Close()
	}
}

// TestCloseDuringDownload: closing the agent's end while bytes flow
// through its pipe ends both ends and leaves no descriptor behind.
func TestCloseDuringDownload(t *testing.T) {
	before := openFDs(t)
	host, agent := pair(t)
	hc, ac := openConn(t, host, agent, 1)
	dest, destPeer := tcpPair(t)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := destPeer.Write(chunk); err != nil {
				return
			}
		}
	}()
	copied := make(chan error, 1)
	go func() {
		_, err := hc.ReadFrom(dest)
		copied <- err
	}()
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(ac, buf); err != nil {
		t.Fatal(err)
	}
	ac.Close()
	select {
	case err := <-copied:
		if !errors.Is(err, ErrConnReset) {
			t.Errorf("the host's copy ended with %v, want the reset", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the host's copy went on after the agent closed the connection")
	}
	hc.Close()
	dest.Close()
	destPeer.Close()
	host.conn.Close()
	<-host.done
	<-agent.done
	waitFDs(t, before)
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// waitFDs waits for the process's descriptors to be back at n (the
// runtime closes some asynchronously), failing after a while. The idle
// pool of outgoing pipes is emptied first: it is meant to stay.
func waitFDs(t *testing.T, n int) {
	t.Helper()
	sendPipes.mu.Lock()
	for _, p := range sendPipes.idle {
		p.close()
	}
	sendPipes.idle = nil
	sendPipes.mu.Unlock()
	for i := 0; ; i++ {
		got := openFDs(t)
		if got <= n {
			return
		}
		if i == 200 {
			t.Fatalf("%d descriptors open, %d before: a pipe or socket leaked", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReceivePipesBounded: an agent gives pipes to at most
// maxReceivePipes connections at once (pipe pages count against a
// per-user limit); the others carry their bytes in memory, and a closed
// connection's pipe goes to the next one.
func TestReceivePipesBounded(t *testing.T) {
	host, agent := pair(t)
	data := make([]byte, 2<<20)
	rand.Read(data)
	var ends [][2]*Conn
	piped := 0
	for id := uint32(1); id <= maxReceivePipes+2; id++ {
		hc, ac := openConn(t, host, agent, id)
		ends = append(ends, [2]*Conn{hc, ac})
		if ac.in0 != nil {
			piped++
		}
	}
	if piped != maxReceivePipes {
		t.Fatalf("%d connections got a pipe, want %d", piped, maxReceivePipes)
	}
	for _, e := range ends {
		go func() {
			e[0].Write(data)
			e[0].CloseWrite()
		}()
		var b bytes.Buffer
		if _, err := e[1].WriteTo(&b); err != nil || !bytes.Equal(b.Bytes(), data) {
			t.Fatalf("connection %d (pipe %v): %d bytes, %v", e[1].id, e[1].in0 != nil, b.Len(), err)
		}
	}
	ends[0][1].Close()
	if _, ac := openConn(t, host, agent, 100); ac.in0 == nil {
		t.Error("a closed connection's pipe was not given to the next")
	}
}

// TestSpliceRefused: where splice is refused (an old kernel, a seccomp
// filter, a file that has no splice), both ends copy instead and the
// bytes arrive intact.
func TestSpliceRefused(t *testing.T) {
	refuseSplice.Store(true)
	defer refuseSplice.Store(false)
	host, agent := pair(t)
	data := make([]byte, 3<<20+7)
	rand.Read(data)
	if got := download(t, host, agent, 1, data, false); !bytes.Equal(got, data) {
		t.Fatalf("the program got %d bytes, want the destination's %d (first difference at %d)", len(got), len(data), firstDiff(got, data))
	}
	if !agent.tn.noSplice.Load() {
		t.Error("the agent did not note that the stream takes no splice")
	}
}

// TestIdleConnectionHoldsNoPipe: the host takes an outgoing pipe only
// while a frame is spliced, so a tunnel waiting on a quiet destination
// (a client's kept-alive connection) holds none.
func TestIdleConnectionHoldsNoPipe(t *testing.T) {
	host, agent := pair(t)
	hc, ac := openConn(t, host, agent, 1)
	dest, destPeer := tcpPair(t)
	waitFDs(t, openFDs(t)) // empties the idle pool
	before := openFDs(t)
	done := make(chan error, 1)
	go func() {
		_, err := hc.ReadFrom(dest)
		hc.CloseWrite()
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if n := openFDs(t); n != before {
		t.Errorf("%d descriptors while the destination is quiet, %d before: the idle tunnel holds a pipe", n, before)
	}
	destPeer.Write([]byte("late bytes"))
	destPeer.CloseWrite()
	got, err := io.ReadAll(struct{ io.Reader }{ac})
	if err == nil {
		err = <-done
	}
	if string(got) != "late bytes" || err != nil {
		t.Fatalf("got %q, %v", got, err)
	}
}
