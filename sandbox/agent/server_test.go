package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pair serves an agent over a socketpair for workspace dir and returns its
// client; cleanup closes the client and waits for Serve to return, so the
// next test's agent does not share this process's children with it (each
// agent reaps every child of its process, as PID 1 must).
func pair(t *testing.T, dir string) (*Client, <-chan error) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := os.NewFile(uintptr(fds[0]), "agent"), os.NewFile(uintptr(fds[1]), "client")
	a, err := net.FileConn(fa)
	fa.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.FileConn(fb)
	fb.Close()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(a, ServeOptions{Logf: t.Logf}) }()
	c, err := Dial(context.Background(), b, Hello{Workspace: dir, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return 10s after the client closed the stream")
		}
	})
	return c, served
}

func wireCode(err error) string {
	var we *WireError
	if errors.As(err, &we) {
		return we.Code
	}
	return ""
}

// A command flooding stdout while another takes stdin and small requests
// (answered on the agent's read loop) keep coming: every side must keep
// moving. The agent once wrote inline replies on its read loop and the
// client wrote acks on its reader, and the two blocked on each other.
func TestFloodingOutputWithStdinAndStatsCompletes(t *testing.T) {
	c, _ := pair(t, t.TempDir())
	sink, err := c.Start("exec", ExecRequest{Args: []string{"/bin/sh", "-c", "cat > /dev/null"}, Stdin: true, TimeoutMs: 120000}, Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	flood, err := c.Start("exec", ExecRequest{Args: []string{"/bin/sh", "-c", "head -c 60000000 /dev/zero"}, TimeoutMs: 120000},
		Handlers{OnData: func(_ FrameType, p []byte) { got.Add(int64(len(p))) }})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		buf := make([]byte, 1<<20)
		for i := 0; i < 60; i++ {
			if _, err := sink.Write(buf); err != nil {
				return
			}
		}
		sink.CloseInput()
	}()
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			c.Do(ctx, "fs.stat", FSPathRequest{Path: "."}, nil)
			cancel()
		}
	}()
	select {
	case <-flood.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("stuck: %d of 60000000 bytes of output after 60s", got.Load())
	}
	if _, err := flood.Wait(); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 60000000 {
		t.Errorf("got %d bytes of output, want 60000000", got.Load())
	}
	select {
	case <-sink.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the stdin consumer did not finish")
	}
}

// A reply too big for one frame is an error the caller can act on, and
// the agent keeps serving; it once refused to send it and went mute.
func TestOversizeReplyIsTooLargeAndAgentLives(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), make([]byte, MaxPayload+1), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := pair(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Do(ctx, "fs.read", FSReadRequest{Path: "big.txt", MaxBytes: 2 * MaxPayload}, nil)
	if wireCode(err) != CodeTooLarge {
		t.Fatalf("reading %d bytes: %v, want a %s error", MaxPayload+1, err, CodeTooLarge)
	}
	if err := c.Do(ctx, "ping", nil, nil); err != nil {
		t.Fatalf("ping after the refused read: %v", err)
	}
}
