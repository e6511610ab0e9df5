//go:build linux

package local

import (
	"bytes"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// streamPair wraps both ends of a fresh socketpair as streams.
func streamPair(t *testing.T) (a, b *stream) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ends [2]*stream
	for i, fd := range fds {
		s, err := newEpollStream(os.NewFile(uintptr(fd), "end"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ends[i] = s
	}
	return ends[0], ends[1]
}

// ready reports whether the epoll instance ep has an event (without
// waiting), the way the runtime's poller would be woken by it.
func ready(t *testing.T, ep *os.File) bool {
	t.Helper()
	var n int
	var err error
	rc, _ := ep.SyscallConn()
	rc.Control(func(fd uintptr) {
		var ev [1]unix.EpollEvent
		n, err = unix.EpollWait(int(fd), ev[:], 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// The peer reading what a stream wrote must not wake the writer's poller:
// a Unix socket signals EPOLLOUT to its writer at every message its peer
// consumes, and the runtime's poller, watching both directions, woke the
// idle host at every request the agent read and the idle agent at every
// reply the host read (see stream). With the old stream (the socket in the
// runtime's poller) the writer's descriptor is reported ready here.
func TestStreamPeerReadDoesNotWakeTheWriter(t *testing.T) {
	a, b := streamPair(t)
	msg := bytes.Repeat([]byte("x"), 1024)
	for i := range 3 {
		if _, err := a.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round %d: read %q, %v", i, got[:8], err)
		}
		if ready(t, a.in) || ready(t, a.out) {
			t.Fatalf("round %d: the peer's read of what the stream wrote made the stream's own poller ready", i)
		}
	}
	// Input still wakes it.
	if _, err := b.Write(msg); err != nil {
		t.Fatal(err)
	}
	if !ready(t, a.in) {
		t.Fatal("input for the stream did not make its poller ready")
	}
}

// A writer that fills the socket parks and resumes as the peer reads; a
// reader parks until input comes; Close ends both parked calls and closes
// every descriptor the stream made.
func TestStreamParksAndCloses(t *testing.T) {
	fdsBefore := openFDs(t)
	a, b := streamPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: far over the socket's buffer
	wrote := make(chan error, 1)
	go func() {
		_, err := a.Write(big)
		wrote <- err
	}()
	time.Sleep(20 * time.Millisecond) // the writer is parked on a full socket by now
	got := make([]byte, len(big))
	if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("reading the big write: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if a.armed || ready(t, a.out) {
		t.Fatal("the writer's wait for room is still armed after the write")
	}

	read := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 16))
		read <- err
	}()
	time.Sleep(20 * time.Millisecond) // parked: nothing to read
	b.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("a Read parked on a stream returned no error when the stream closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a Read parked on the stream")
	}
	// The peer sees the end.
	if _, err := a.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("the peer of a closed stream read %v, want EOF", err)
	}
	a.Close()
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("a write to a closed stream succeeded")
	}
	if n := openFDs(t); n != fdsBefore {
		t.Fatalf("%d descriptors open after closing both streams, %d before", n, fdsBefore)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TryWrite writes what the socket takes and returns at once when it is
// full, never waiting; what it wrote arrives whole and in order, and on a
// closed stream it fails.
func TestStreamTryWriteNeverWaits(t *testing.T) {
	a, b := streamPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: far over the socket's buffer
	done := make(chan struct{})
	var sent []byte
	go func() {
		defer close(done)
		for p := big; len(p) > 0; {
			n, err := a.TryWrite(p)
			if err != nil {
				t.Errorf("TryWrite: %v", err)
				return
			}
			sent = append(sent, p[:n]...)
			if n < len(p) {
				return // full
			}
			p = p[n:]
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("TryWrite waited on a full socket")
	}
	if len(sent) == 0 || len(sent) >= len(big) {
		t.Fatalf("TryWrite took %d of %d bytes into an unread socket, want some but not all", len(sent), len(big))
	}
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, sent) {
		t.Fatalf("reading what TryWrite took: %v", err)
	}
	if a.armed || ready(t, a.out) {
		t.Fatal("TryWrite armed the wait for room")
	}
	a.Close()
	if _, err := a.TryWrite([]byte("x")); err == nil {
		t.Fatal("TryWrite to a closed stream succeeded")
	}
}

// Hangup's channel closes when the peer hangs up, not when data arrives;
// the watch ends, and leaves no descriptor open, when the stream closes.
func TestStreamHangup(t *testing.T) {
	fdsBefore := openFDs(t)
	a, b := streamPair(t)
	hup := a.Hangup()
	if hup == nil {
		t.Fatal("no hang-up watch")
	}
	if _, err := b.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hup:
		t.Fatal("Hangup closed when data arrived")
	case <-time.After(50 * time.Millisecond):
	}
	b.Close()
	select {
	case <-hup:
	case <-time.After(10 * time.Second):
		t.Fatal("Hangup did not close when the peer closed its end")
	}
	// Closing the stream ends a watch that never fired.
	c, d := streamPair(t)
	hup2 := c.Hangup()
	c.Close()
	select {
	case <-hup2:
	case <-time.After(10 * time.Second):
		t.Fatal("Hangup did not close with the stream")
	}
	a.Close()
	d.Close()
	if n := openFDs(t); n != fdsBefore {
		t.Fatalf("%d descriptors open after closing the streams, %d before", n, fdsBefore)
	}
}
