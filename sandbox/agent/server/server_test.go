//go:build linux

// The agent serves only on Linux (hardenProcess refuses elsewhere), so the
// tests that run one are Linux-only.

package server

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// pair serves an agent over a socketpair for workspace dir and returns its
// client; cleanup closes the client and waits for Serve to return, so the
// next test's agent does not share this process's children with it (each
// agent reaps every child of its process, as PID 1 must).
func pair(t *testing.T, dir string) (*agent.Client, <-chan error) {
	t.Helper()
	return servePair(t, ServeOptions{}, wire.Hello{Workspace: dir, Env: []string{"PATH=/usr/bin:/bin"}})
}

// servePair is pair with the agent's options and the client's Hello
// given (Logf defaults to t.Logf).
func servePair(t *testing.T, opts ServeOptions, hello wire.Hello) (*agent.Client, <-chan error) {
	t.Helper()
	c, served, _ := servePairConn(t, opts, hello)
	return c, served
}

// servePairConn is servePair that also returns the client's end of the
// stream, for tests that write frames the client would not.
func servePairConn(t *testing.T, opts ServeOptions, hello wire.Hello) (*agent.Client, <-chan error, net.Conn) {
	t.Helper()
	return servePairWrapped(t, opts, hello, func(c net.Conn) io.ReadWriteCloser { return c })
}

// servePairWrapped is servePairConn with the agent's end of the stream
// wrapped by wrap.
func servePairWrapped(t *testing.T, opts ServeOptions, hello wire.Hello, wrap func(net.Conn) io.ReadWriteCloser) (*agent.Client, <-chan error, net.Conn) {
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
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	served := make(chan error, 1)
	go func() { served <- Serve(wrap(a), opts) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, b, hello)
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
	return c, served, b
}

// decodeResult unmarshals a call's result (Call.Wait's values).
func decodeResult[T any](res json.RawMessage, err error) (T, error) {
	var v T
	if err != nil {
		return v, err
	}
	if len(res) > 0 {
		err = json.Unmarshal(res, &v)
	}
	return v, err
}

func wireCode(err error) driver.Code {
	var we *wire.WireError
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
	t.Run("queued", func(t *testing.T) {
		c, _ := pair(t, t.TempDir())
		testFloodingOutputWithStdinAndStats(t, c)
	})
	// Over a stream that can write without waiting, as the local
	// backend's, the read loop writes its replies itself (answer) — and
	// must still never wait for room: the stream is full most of the time
	// here. Cut short at 5 bytes, every reply goes out part way through a
	// frame, and writeLoop finishes it.
	for _, limit := range []int{0, 5} {
		t.Run(fmt.Sprintf("inline,cut=%d", limit), func(t *testing.T) {
			tc := &tryConn{limit: limit}
			c, _, _ := servePairWrapped(t, ServeOptions{}, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}},
				func(a net.Conn) io.ReadWriteCloser { tc.Conn = a; return tc })
			testFloodingOutputWithStdinAndStats(t, c)
			tc.check(t)
		})
	}
}

func testFloodingOutputWithStdinAndStats(t *testing.T, c *agent.Client) {
	sink, err := c.Start("exec", wire.ExecRequest{Args: []string{"/bin/sh", "-c", "cat > /dev/null"}, Stdin: true, TimeoutMs: 120000}, agent.Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	flood, err := c.Start("exec", wire.ExecRequest{Args: []string{"/bin/sh", "-c", "head -c 60000000 /dev/zero"}, TimeoutMs: 120000},
		agent.Handlers{OnData: func(_ wire.FrameType, p []byte) { got.Add(int64(len(p))) }})
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
			c.Do(ctx, "fs.stat", wire.FSPathRequest{Path: "."}, nil)
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

// A request too big for one frame is refused before anything is sent,
// with an error that says so (TOO_LARGE), and the stream stays usable. The
// client once reported it as the agent's death ("sandbox agent is gone:
// agent protocol error: frame of ... bytes exceeds ...").
func TestOversizeRequestIsTooLargeAndStreamLives(t *testing.T) {
	c, _ := pair(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Do(ctx, "fs.write", wire.FSWriteRequest{Path: "big", Data: make([]byte, wire.MaxPayload)}, nil)
	if wireCode(err) != wire.CodeTooLarge || errors.Is(err, agent.ErrDead) {
		t.Fatalf("writing %d bytes in one request: %v, want a %s error", wire.MaxPayload, err, wire.CodeTooLarge)
	}
	if err := c.Do(ctx, "ping", nil, nil); err != nil {
		t.Fatalf("ping after the refused request: %v", err)
	}
}

// A reply too big for one frame is an error the caller can act on, and
// the agent keeps serving; it once refused to send it and went mute.
func TestOversizeReplyIsTooLargeAndAgentLives(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), make([]byte, wire.MaxPayload+1), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := pair(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Do(ctx, "fs.read", wire.FSReadRequest{Path: "big.txt", MaxBytes: 2 * wire.MaxPayload}, nil)
	if wireCode(err) != wire.CodeTooLarge {
		t.Fatalf("reading %d bytes: %v, want a %s error", wire.MaxPayload+1, err, wire.CodeTooLarge)
	}
	if err := c.Do(ctx, "ping", nil, nil); err != nil {
		t.Fatalf("ping after the refused read: %v", err)
	}
}

// BenchmarkRead1KB: one small fs.read round trip over a socketpair, the
// path Files.Read takes (answered on the agent's read loop): queued to
// its writer over a plain socket, written by the read loop itself over a
// stream with TryWrite (the local backend's).
func BenchmarkRead1KB(b *testing.B) {
	b.Run("queued", func(b *testing.B) { benchmarkRead1KB(b, func(c net.Conn) io.ReadWriteCloser { return c }) })
	b.Run("inline", func(b *testing.B) {
		benchmarkRead1KB(b, func(c net.Conn) io.ReadWriteCloser { return &tryConn{Conn: c} })
	})
}

func benchmarkRead1KB(b *testing.B, wrap func(net.Conn) io.ReadWriteCloser) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "k.bin"), make([]byte, 1024), 0o644); err != nil {
		b.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	a, _ := net.FileConn(os.NewFile(uintptr(fds[0]), "agent"))
	cc, _ := net.FileConn(os.NewFile(uintptr(fds[1]), "client"))
	go Serve(wrap(a), ServeOptions{})
	c, err := agent.Dial(context.Background(), cc, wire.Hello{Workspace: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		var rep wire.FSReadReply
		if err := c.Do(ctx, "fs.read", wire.FSReadRequest{Path: "k.bin"}, &rep); err != nil || len(rep.Data) != 1024 {
			b.Fatalf("read: %d bytes, %v", len(rep.Data), err)
		}
	}
}

// Killing a job that has already exited must not touch the process that
// now has its PID. The agent's own next command is the likeliest one to
// get it; the kernel is made to hand it over at once (ns_last_pid, root
// only).
func TestKillOfExitedJobSparesTheProcessWithItsPID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to choose the next PID (ns_last_pid)")
	}
	c, _ := pair(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 0; attempt < 20; attempt++ {
		var old wire.ExecReply
		if err := c.Do(ctx, "exec", wire.ExecRequest{Args: []string{"/bin/true"}, Job: true}, &old); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, "job.wait", wire.JobRef{ID: old.JobID}, nil); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(itoa(old.PID-1)), 0); err != nil {
			t.Skipf("cannot choose the next PID: %v", err)
		}
		var heir wire.ExecReply
		if err := c.Do(ctx, "exec", wire.ExecRequest{Args: []string{"/bin/sleep", "30"}, Job: true}, &heir); err != nil {
			t.Fatal(err)
		}
		if heir.PID != old.PID {
			c.Do(ctx, "job.kill", wire.JobSignalRequest{ID: heir.JobID, Signal: int(syscall.SIGKILL)}, nil)
			continue // another process took the PID first
		}
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGSTOP} {
			if err := c.Do(ctx, "job.kill", wire.JobSignalRequest{ID: old.JobID, Signal: int(sig)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(500 * time.Millisecond) // the runner's kill grace (300 ms) and a margin
		var st wire.JobStatus
		if err := c.Do(ctx, "job.status", wire.JobRef{ID: heir.JobID}, &st); err != nil {
			t.Fatal(err)
		}
		if !st.Running {
			t.Fatalf("killing the exited job %s ended job %s, which reused its PID %d: %+v", old.JobID, heir.JobID, old.PID, st)
		}
		if b, err := os.ReadFile("/proc/" + itoa(heir.PID) + "/stat"); err == nil && bytes.Contains(b, []byte(") T ")) {
			t.Fatalf("killing the exited job %s stopped PID %d, now job %s's", old.JobID, old.PID, heir.JobID)
		}
		c.Do(ctx, "job.kill", wire.JobSignalRequest{ID: heir.JobID, Signal: int(syscall.SIGKILL)}, nil)
		return
	}
	t.Skip("could not get a reused PID in 20 attempts")
}

func itoa(n int) string { return strconv.Itoa(n) }

// A FIFO a command left in the workspace must not hang any file request
// (a blocking open waits for a peer that never comes), nor, through a
// stuck request, the agent's exit when the stream closes (pair's cleanup
// checks that Serve returns).
func TestFIFOInWorkspaceIsRefusedNotWaitedOn(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("pipe", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	c, _ := pair(t, dir)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "pipe", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("hi"))
	tw.Close()
	for _, tc := range []struct {
		name string
		op   string
		args any
		in   []byte
	}{
		{"edit", "fs.edit", wire.FSEditRequest{Path: "pipe", Old: "a", New: "b"}, nil},
		{"copy from", "fs.copy", wire.FSMoveRequest{From: "pipe", To: "copy"}, nil},
		{"append", "fs.write", wire.FSWriteRequest{Path: "pipe", Data: []byte("x"), Append: true}, nil},
		{"write through a link", "fs.write", wire.FSWriteRequest{Path: "link", Data: []byte("x")}, nil},
		{"read", "fs.read", wire.FSReadRequest{Path: "pipe"}, nil},
		{"copy in over it", "fs.copyin", wire.FSPathRequest{Path: "."}, tb.Bytes()},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		call, err := c.Start(tc.op, tc.args, agent.Handlers{})
		if err != nil {
			t.Fatal(err)
		}
		if tc.in != nil {
			call.Write(tc.in)
			call.CloseInput()
		}
		_, err = call.WaitContext(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: still waiting after 5s", tc.name)
		}
		if code := wireCode(err); code != wire.CodeInvalidArgument {
			t.Errorf("%s: %v, want a %s error (not a regular file)", tc.name, err, wire.CodeInvalidArgument)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dir, "pipe")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}
}

// A MaxOutput too big for the tails to fit in one reply frame is capped
// by the agent: the command's reply still arrives, with the middle of the
// output dropped and counted.
func TestHugeMaxOutputStillGetsAReply(t *testing.T) {
	c, _ := pair(t, t.TempDir())
	var streamed atomic.Int64
	call, err := c.Start("exec", wire.ExecRequest{Args: []string{"/bin/sh", "-c", "head -c 26000000 /dev/zero"}, MaxOutput: 26000000, TimeoutMs: 60000},
		agent.Handlers{OnData: func(_ wire.FrameType, p []byte) { streamed.Add(int64(len(p))) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := decodeResult[wire.ExecReply](call.WaitContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if kept := streamed.Load() + int64(len(rep.StdoutTail)); kept > maxCapture || kept+rep.StdoutDropped != 26000000 {
		t.Errorf("streamed %d + tail %d + dropped %d: want at most %d kept and 26000000 in all", streamed.Load(), len(rep.StdoutTail), rep.StdoutDropped, maxCapture)
	}
}

// failingConn is a stream whose writes start failing on demand, as a
// broken pipe or a refused frame would.
type failingConn struct {
	net.Conn
	fail atomic.Bool
	err  error // what a failing write returns; a generic error if nil
}

func (c *failingConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		if c.err != nil {
			return 0, c.err
		}
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(p)
}

// When the agent cannot write a frame it closes the stream: the client
// then reports the agent gone (ErrDead) at once. It used to stop writing
// but keep the stream open, and every call waited forever.
//
// Serve then returns the write's error, not the read loop's "use of closed
// network connection" (the local backend's agent printed "use of closed
// file" on the user's stderr), and nothing when the client went away
// (EPIPE): that is how every agent's life ends.
func TestAgentWriteFailureEndsTheStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantErr string // "" for a nil error from Serve
	}{
		{"write fails", nil, "injected write failure"},
		{"client gone", syscall.EPIPE, ""},
	} {
		t.Run(tc.name, func(t *testing.T) { testAgentWriteFailure(t, tc.err, tc.wantErr, false) })
		// The same when the read loop writes its replies itself
		// (server.answer over a stream with TryWrite).
		t.Run(tc.name+",inline", func(t *testing.T) { testAgentWriteFailure(t, tc.err, tc.wantErr, true) })
	}
}

// failingTryConn is a failingConn with TryWrite, which fails as its
// Write does.
type failingTryConn struct{ *failingConn }

func (c failingTryConn) TryWrite(p []byte) (int, error) { return c.Write(p) }

func testAgentWriteFailure(t *testing.T, werr error, wantErr string, inline bool) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := os.NewFile(uintptr(fds[0]), "agent"), os.NewFile(uintptr(fds[1]), "client")
	a, _ := net.FileConn(fa)
	b, _ := net.FileConn(fb)
	fa.Close()
	fb.Close()
	fc := &failingConn{Conn: a, err: werr}
	var conn io.ReadWriteCloser = fc
	if inline {
		conn = failingTryConn{fc}
	}
	served := make(chan error, 1)
	go func() { served <- Serve(conn, ServeOptions{Logf: t.Logf}) }()
	c, err := agent.Dial(context.Background(), b, wire.Hello{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Do(ctx, "fs.stat", wire.FSPathRequest{Path: "."}, nil); err != nil {
		t.Fatal(err)
	}
	fc.fail.Store(true)
	for _, op := range []string{"fs.stat", "job.list"} { // answered inline, and by a handler
		if err := c.Do(ctx, op, wire.FSPathRequest{Path: "."}, nil); !errors.Is(err, agent.ErrDead) {
			t.Fatalf("%s after the agent's write failed: %v, want ErrDead", op, err)
		}
	}
	select {
	case err := <-served:
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("Serve after the client went away: %v, want nil", err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr) || errors.Is(err, net.ErrClosed)):
			t.Errorf("Serve after its write failed: %v, want the write's error %q", err, wantErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its stream failed")
	}
}
