//go:build linux

package tunnel

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// TestHandoffSharedBlockingFlag (found in review; it failed on the first
// handoff code: "the host's Close of the handed-over socket blocks too"): a hostile agent keeps a copy of the
// socket it hands over (dup before sending, or simply not closing it) and,
// once the host made the description non-blocking (net.FileConn), clears
// O_NONBLOCK on its copy. O_NONBLOCK is a flag of the open file
// description, which the host shares. The host's reads then block in the
// kernel: the proxy's header deadline (SetReadDeadline) does not end them
// and Close does not either; egressProxy.close waits for the handler
// (wg.Wait) and so Sandbox.Close hangs.
func TestHandoffSharedBlockingFlag(t *testing.T) {
	host, agent, _ := handoffPair(t)
	program, accepted := tcpPair(t)
	defer program.Close()
	keep := fdOf(accepted) // the agent keeps its copy: it never closes accepted
	if handed := agent.tn.HandOff(1, accepted, func() {}); !handed {
		t.Fatalf("HandOff: %v", handed)
	}
	var hc net.Conn
	select {
	case hc = <-host.tn.accepted:
	case <-time.After(30 * time.Second):
		t.Fatal("no connection")
	}
	// The agent, after the host's FileConn set O_NONBLOCK:
	fl, _ := unix.FcntlInt(uintptr(keep), unix.F_GETFL, 0)
	if _, err := unix.FcntlInt(uintptr(keep), unix.F_SETFL, fl&^unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	// The host's proxy reads the request with a header deadline.
	hc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := hc.Read(make([]byte, 10))
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("read returned %v", err)
		return
	case <-time.After(3 * time.Second):
	}
	closed := make(chan struct{})
	go func() { hc.Close(); close(closed) }() // what egressProxy.close / untrack / Shutdown do
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Errorf("the host's Close of the handed-over socket blocks too (internal/poll waits for the read in progress)")
	}
	select {
	case err := <-done:
		t.Errorf("read ended only after Close: %v", err)
	case <-time.After(100 * time.Millisecond):
		t.Errorf("the host's read of a handed-over socket ignored its 200 ms deadline and Close: still blocked in the kernel after 6 s (the agent cleared O_NONBLOCK on the shared description)")
	}
	program.Write([]byte("x")) // unblock it so the test ends
	<-done
	<-closed
}

// TestHandoffShutdownUnblocks: the mitigation Close relies on: shutdown(2)
// on the handed socket (through RawConn.Control, which does not wait for
// the read) wakes a read blocked in the kernel, after which Close returns.
func TestHandoffShutdownUnblocks(t *testing.T) {
	host, agent, _ := handoffPair(t)
	program, accepted := tcpPair(t)
	defer program.Close()
	keep := fdOf(accepted)
	if handed := agent.tn.HandOff(1, accepted, func() {}); !handed {
		t.Fatalf("HandOff: %v", handed)
	}
	hc := <-host.tn.accepted
	fl, _ := unix.FcntlInt(uintptr(keep), unix.F_GETFL, 0)
	unix.FcntlInt(uintptr(keep), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	done := make(chan error, 1)
	go func() { _, err := hc.Read(make([]byte, 10)); done <- err }()
	time.Sleep(500 * time.Millisecond)
	rc, _ := hc.(*handedConn).SyscallConn()
	rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	select {
	case err := <-done:
		t.Logf("read returned after shutdown: %v", err)
	case <-time.After(3 * time.Second):
		t.Fatal("shutdown did not wake the blocked read")
	}
	hc.Close()
}

// TestHandoffSocketHeaderAllocatesNothing (found in review; it failed on
// the first handoff code with 63 MiB held by 4 connections): whatever connects to a handoff
// socket (in Docker, any program in the container) can make the host
// allocate and hold a 16 MiB payload buffer per connection by sending a
// header that announces one and then nothing: ServeHandoff reads the whole
// frame (wire.ReadFrame) before it checks that it is a ConnHandoff frame
// without payload, and there is no deadline.
func TestHandoffSocketHeaderAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tn := New(func(uint32, wire.FrameType, []byte) error { return nil }, func([]byte) error { return nil }, Addr("test"))
	go tn.ServeHandoff(l)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	for i := 0; i < maxHandoffSockets; i++ {
		c, err := net.Dial("unix", dir+"/s")
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.Write(wire.AppendHeader(nil, 1, wire.FrameConnHandoff, wire.MaxPayload))
	}
	time.Sleep(2 * time.Second)
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d MiB for %d idle connections", grown>>20, len(conns))
	if grown > 8<<20 {
		t.Errorf("%d connections that sent one header hold %d MiB of the host's memory (no deadline, no check of the header first)", len(conns), grown>>20)
	}
	for _, c := range conns {
		c.Close()
	}
	tn.Shutdown()
}

// A handed-over socket must be one the proxy accepted: its own address is
// the proxy listener's. In Docker anything in the container reaches the
// handoff socket, and a program handing over a socket of its own (to
// claim connection ids, pass the agent's connection cap, or clear
// O_NONBLOCK under the host) is refused.
func TestHandoffOnlyOfTheProxysSockets(t *testing.T) {
	host, agent, hostErr := handoffPair(t)
	_, accepted := tcpPair(t)
	if err := host.tn.ExpectHandoffsFrom(accepted.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	if !agent.tn.HandOff(1, accepted, func() {}) {
		t.Fatal("HandOff of the proxy's accepted socket")
	}
	select {
	case hc := <-host.tn.accepted:
		hc.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy's accepted socket was not taken")
	}
	own, _ := tcpPair(t) // a program's socket: an ephemeral address of its own
	agent.tn.HandOff(2, own, func() {})
	select {
	case hc, ok := <-host.tn.accepted:
		if ok {
			t.Fatalf("the host took a socket bound to %v", hc.LocalAddr())
		}
		// closed: the stream ended; its error says why
	case <-time.After(30 * time.Second):
		t.Fatal("a program's own socket was neither taken nor refused")
	case err := <-hostErr:
		hostErr = nil
		if err == nil || !strings.Contains(err.Error(), "not the proxy's") {
			t.Fatalf("the host's stream ended with %v, want the socket's address refused", err)
		}
	}
	if hostErr != nil {
		if err := <-hostErr; err == nil || !strings.Contains(err.Error(), "not the proxy's") {
			t.Fatalf("the host's stream ended with %v, want the socket's address refused", err)
		}
	}
}
