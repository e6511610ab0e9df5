package sandboxtest

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// StalledInput checks that a command's input is never cut short in
// silence when sb's agent stops reading (stop and resume as for
// StalledAgent): `wc -c` gets 1000 bytes, the agent stops, an 8 MB
// Files.Write is given up half sent, 1000 more bytes come while it still
// occupies the stream, and the agent goes on. Run must report either the
// whole 2000 bytes or an error; it reported success with "1000" when the
// input that could not be sent was dropped and the input closed (review
// R2 of session 8).
func StalledInput(t *testing.T, sb *sandbox.Sandbox, stop, resume func()) {
	t.Helper()
	ctx := context.Background()
	pr, pw := io.Pipe()
	defer pw.Close()
	type outcome struct {
		res *sandbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"wc", "-c"}, Stdin: pr})
		done <- outcome{res, err}
	}()
	chunk := strings.Repeat("x", 1000)
	if _, err := io.WriteString(pw, chunk); err != nil {
		t.Fatal(err)
	}
	stop()
	resumeOnce := sync.OnceFunc(resume)
	t.Cleanup(resumeOnce)
	bctx, cancel := context.WithTimeout(ctx, time.Second)
	err := sb.Files.Write(bctx, "big-input.bin", make([]byte, 8<<20), 0o644)
	cancel()
	if sandbox.CodeOf(err) != sandbox.CodeTimeout {
		t.Fatalf("8 MB Files.Write on a stopped agent: %v, want %s", err, sandbox.CodeTimeout)
	}
	if _, err := io.WriteString(pw, chunk); err != nil {
		t.Fatal(err)
	}
	// Longer than a write with no deadline waits for a stalled stream.
	time.Sleep(3 * time.Second)
	resumeOnce()
	pw.Close()
	select {
	case o := <-done:
		if o.err == nil && strings.TrimSpace(o.res.Stdout) != "2000" {
			t.Errorf("Run succeeded with stdout %q: the command read part of the 2000 bytes given", o.res.Stdout)
		}
		if o.err != nil {
			t.Logf("Run: %v", o.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run had not returned 60 s after the agent went on and its input was closed")
	}
}
