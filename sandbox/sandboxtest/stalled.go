package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// StalledAgent checks that calls keep their deadlines while sb's agent
// reads nothing: stop makes it stop reading its stream (SIGSTOP of the
// agent's process, in the backend's own test), resume lets it go on.
//
// A request too big for the stream's buffers (an 8 MB Files.Write) sent
// to an agent that reads nothing (stopped, frozen, or hostile) used to
// block in the stream's write with no deadline: the caller's 2 s deadline
// passed unnoticed, and every later call queued behind the blocked write,
// deadline or not, so the whole sandbox hung until Close. Each call must
// end with SBX_TIMEOUT at its deadline (plus the agent's grace); once the
// agent reads again the sandbox works, and the big file is whole or
// absent, never torn.
//
// Not covered yet: Python.Run and shell calls on such an agent wait past
// their deadline (the kernel's teardown waits for the process's exit,
// which the stopped agent never reports).
func StalledAgent(t *testing.T, sb *sandbox.Sandbox, stop, resume func()) {
	t.Helper()
	ctx := context.Background()
	if err := sb.Files.Write(ctx, "small.txt", []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resumeOnce := func() {
		if !resumed {
			resumed = true
			resume()
		}
	}
	t.Cleanup(resumeOnce)

	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Files.Write 8 MB", func(ctx context.Context) error { return sb.Files.Write(ctx, "big.bin", big, 0o644) }},
		{"Files.ReadFile after it", func(ctx context.Context) error { _, err := sb.Files.ReadFile(ctx, "small.txt"); return err }},
		{"Commands.Run after it", func(ctx context.Context) error {
			_, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}})
			return err
		}},
		{"Commands.Run with stdin", func(ctx context.Context) error {
			_, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader("input")})
			return err
		}},
		{"Files.CopyIn", func(ctx context.Context) error {
			return sb.Files.CopyIn(ctx, ".", bytes.NewReader(tarOf(t, "copied.txt", "beta")))
		}},
	}

	stop()
	for _, c := range calls {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- c.call(cctx) }()
		select {
		case err := <-done:
			if sandbox.CodeOf(err) != sandbox.CodeTimeout {
				t.Errorf("%s on a stopped agent: %v after %v, want %s", c.name, err, time.Since(start).Round(time.Millisecond), sandbox.CodeTimeout)
			}
		case <-time.After(30 * time.Second):
			resumeOnce()
			cancel()
			t.Fatalf("%s with a 2 s deadline had not returned after 30 s on an agent that reads nothing", c.name)
		}
		cancel()
	}

	resumeOnce()
	got, err := sb.Files.ReadFile(ctx, "small.txt")
	if err != nil || string(got) != "alpha" {
		t.Fatalf("after the agent went on: ReadFile = %q, %v", got, err)
	}
	if _, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatalf("after the agent went on: Commands.Run: %v", err)
	}
	if b, err := sb.Files.ReadFile(ctx, "big.bin"); err == nil && !bytes.Equal(b, big) {
		t.Errorf("big.bin holds %d bytes that are not what was written (torn)", len(b))
	}
}

// tarOf returns a tar stream holding one file.
func tarOf(t *testing.T, name, content string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
