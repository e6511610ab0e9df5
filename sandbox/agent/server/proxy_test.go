//go:build linux

// The agent serves only on Linux (hardenProcess refuses elsewhere), so the
// tests that run one are Linux-only.

package server

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// proxyPair serves an agent with its egress proxy on a free loopback port
// (in these tests the agent runs in this process, so its "sandbox
// loopback" is the test's) and returns the client and the proxy address.
func proxyPair(t *testing.T) (*agent.Client, string) {
	t.Helper()
	c, _ := servePair(t, ServeOptions{}, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}, Proxy: "127.0.0.1:0"})
	addr := c.Hello().Proxy
	if addr == "" {
		t.Fatal("the agent reported no proxy address")
	}
	return c, addr
}

// TestProxyCarriesBothWays: bytes written to the proxy inside arrive at
// the host's Egress listener and back, large transfers included (more
// than the flow-control window, so credit must come back), and a half
// close passes through.
func TestProxyCarriesBothWays(t *testing.T) {
	c, addr := proxyPair(t)
	l := c.Egress()
	up := make([]byte, 3<<20)
	rand.Read(up)
	down := make([]byte, 5<<20)
	rand.Read(down)
	hostGot := make(chan []byte, 1)
	go func() {
		hc, err := l.Accept()
		if err != nil {
			hostGot <- nil
			return
		}
		defer hc.Close()
		wrote := make(chan struct{})
		go func() {
			hc.Write(down)
			hc.(interface{ CloseWrite() error }).CloseWrite()
			close(wrote)
		}()
		b, _ := io.ReadAll(hc)
		<-wrote
		hostGot <- b
	}()
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		pc.Write(up)
		pc.(*net.TCPConn).CloseWrite()
	}()
	pc.SetReadDeadline(time.Now().Add(60 * time.Second))
	got, err := io.ReadAll(pc)
	if err != nil {
		t.Fatalf("reading from the proxy: %v", err)
	}
	if !bytes.Equal(got, down) {
		t.Fatalf("the sandbox side got %d bytes, want the host's %d", len(got), len(down))
	}
	if b := <-hostGot; !bytes.Equal(b, up) {
		t.Fatalf("the host got %d bytes, want the sandbox's %d", len(b), len(up))
	}
}

// TestProxyHostCloseDropsConnection: when the host drops a connection
// (a refused request), the program inside sees its connection end.
func TestProxyHostCloseDropsConnection(t *testing.T) {
	c, addr := proxyPair(t)
	l := c.Egress()
	go func() {
		hc, err := l.Accept()
		if err == nil {
			buf := make([]byte, 5)
			io.ReadFull(hc, buf)
			hc.Close()
		}
	}()
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pc.Write([]byte("hello and more"))
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = pc.Read(make([]byte, 1))
	if err == nil || errors.Is(err, net.ErrClosed) || isTimeout(err) {
		t.Fatalf("read after the host dropped the connection: %v, want EOF or reset", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestProxyClosedWithStream: closing the client (the sandbox going away)
// ends the Egress listener and the proxy inside.
func TestProxyClosedWithStream(t *testing.T) {
	c, addr := proxyPair(t)
	l := c.Egress()
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	hc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after the stream closed: %v, want net.ErrClosed", err)
	}
	if _, err := hc.Read(make([]byte, 1)); err == nil {
		t.Fatal("read on a tunnelled connection after the stream closed succeeded")
	}
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := pc.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the program's connection outlived the agent's stream: %v", err)
	}
}

// TestNoProxyRefusesConnFrames: an agent without a proxy treats
// connection frames as a protocol error, and so does a client that asked
// for none.
func TestNoProxyRefusesConnFrames(t *testing.T) {
	c, _, raw := servePairConn(t, ServeOptions{}, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	if err := wire.WriteFrame(raw, 1, wire.FrameConnData, []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the agent accepted a connection frame without a proxy")
	}
}
