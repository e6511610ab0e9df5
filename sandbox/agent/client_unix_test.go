//go:build unix

package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// socketPair returns the two ends of a Unix socket pair: a stream whose
// writes return as soon as the bytes are in the kernel's buffer, as the
// local backend's does (net.Pipe's wait for the reader).
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Skip("no socket pair:", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "stream")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// A burst of calls that read their own replies wakes the background
// reader only about twice per linger, whatever the calls' rate: each
// wake-up is another thread woken on the host (a futex call and a context
// switch). It used to go back to an untimed wait whenever it found the
// role held, which it always did: woken by a call's end, it runs only
// once that caller, which goes straight on to its next call, parks to
// wait for that call's reply — so each call's end woke it again. On the
// local backend that was 0.5-0.7 wake-ups per 1 KB Files.ReadFile.
func TestBurstOfCallsWakesTheBackgroundReaderRarely(t *testing.T) {
	hostEnd, agentEnd := socketPair(t)
	a := &scriptedAgent{conn: agentEnd, answer: func(uint32, wire.Request) (any, bool) { return struct{}{}, true }}
	go a.serve()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, hostEnd, wire.Hello{Workspace: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close(); agentEnd.Close() }()
	const n = 5000
	start := time.Now()
	c.mu.Lock()
	w0 := c.bgWakes
	c.mu.Unlock()
	for range n {
		if err := c.Do(context.Background(), "ping", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	c.mu.Lock()
	wakes := c.bgWakes - w0
	c.mu.Unlock()
	budget := 2*int(elapsed/linger) + 10
	t.Logf("%d calls in %v: the background reader woke %d times (budget %d)", n, elapsed, wakes, budget)
	if wakes > budget {
		t.Errorf("%d calls in %v woke the background reader %d times, want at most %d (two per %v)", n, elapsed, wakes, budget, linger)
	}
}

// hangerConn is a stream that tells of its peer's hang-up (Hanger), as
// the local backend's does: the test closes hup when it closes the
// agent's end.
type hangerConn struct {
	net.Conn
	hup chan struct{}
}

func (c hangerConn) Hangup() <-chan struct{} { return c.hup }

func dialHanger(t *testing.T) (*Client, net.Conn, chan struct{}) {
	t.Helper()
	hostEnd, agentEnd := socketPair(t)
	a := &scriptedAgent{conn: agentEnd, answer: func(uint32, wire.Request) (any, bool) { return struct{}{}, true }}
	go a.serve()
	hup := make(chan struct{})
	c, err := Dial(context.Background(), hangerConn{hostEnd, hup}, wire.Hello{Workspace: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); agentEnd.Close() })
	return c, agentEnd, hup
}

// Over a stream that tells of its peer's hang-up, a call after a pause
// longer than linger reads its own reply: the background reader, which
// used to take the stream back after linger to watch for the agent's
// death, now waits for the hang-up, and is not woken at all by the pause
// or the call.
func TestCallAfterAPauseReadsItsOwnReply(t *testing.T) {
	c, _, _ := dialHanger(t)
	for range 3 {
		if err := c.Do(context.Background(), "ping", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	w0 := c.bgWakes
	c.mu.Unlock()
	for range 3 {
		time.Sleep(3 * linger)
		if err := c.Do(context.Background(), "ping", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	wakes, reading := c.bgWakes-w0, c.reading
	c.mu.Unlock()
	if wakes != 0 || reading {
		t.Errorf("across three calls after pauses of %v the background reader woke %d times (holds the role: %v), want never", 3*linger, wakes, reading)
	}
}

// An idle client over such a stream sees the agent's death (Done) from
// the hang-up alone.
func TestIdleClientSeesTheHangUp(t *testing.T) {
	c, agentEnd, hup := dialHanger(t)
	if err := c.Do(context.Background(), "ping", nil, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * linger)
	agentEnd.Close()
	close(hup)
	select {
	case <-c.Done():
		if err := c.Err(); !errors.Is(err, ErrDead) {
			t.Fatalf("Err after the agent hung up: %v, want ErrDead", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not see the agent hang up in 30 s")
	}
}
