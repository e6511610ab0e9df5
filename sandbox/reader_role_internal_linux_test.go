//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/proctest"
)

// The agent client lets a call read its own reply from the stream (the
// reader role, sandbox/agent/client.go). These tests drive it against the
// real local agent: the cases a user meets — a hung agent, many callers at
// once beside a streaming command, an agent that dies while nothing is
// asked of it, Close during a call.

func newRoleSandbox(t *testing.T) *Sandbox {
	t.Helper()
	sb, err := New(context.Background(), AllowWeaker(TierLandlock, TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

func agentPID(t *testing.T, sb *Sandbox) int {
	t.Helper()
	pid, err := strconv.Atoi(sb.Info().Extra["agent_pid"])
	if err != nil {
		t.Skipf("the backend does not name its agent's process: %v", err)
	}
	return pid
}

// A call whose caller gives up on a hung agent (stopped: it reads nothing)
// returns the caller's error after the agent's grace to confirm the
// cancel, and once the agent goes on, the sandbox answers as before.
func TestRealAgentCancelledCallOnAHungAgentReturns(t *testing.T) {
	sb := newRoleSandbox(t)
	ctx := context.Background()
	if err := sb.Files.Write(ctx, "a.txt", []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, sb)
	proctest.Stop(t, pid)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := sb.Files.ReadFile(cctx, "a.txt")
		done <- err
	}()
	select {
	case err := <-done:
		if CodeOf(err) != CodeTimeout {
			t.Errorf("ReadFile on a hung agent: %v, want SBX_TIMEOUT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled ReadFile on a hung agent did not return")
	}
	cancel()
	syscall.Kill(pid, syscall.SIGCONT)
	for i := range 20 {
		got, err := sb.Files.ReadFile(ctx, "a.txt")
		if err != nil || string(got) != "alpha" {
			t.Fatalf("call %d after the agent went on: %q %v", i, got, err)
		}
	}
}

// Many callers at once, each reading its own file, beside a command whose
// output streams all along: every caller gets its own reply, and the
// command's output arrives whole.
func TestRealAgentConcurrentCallsGetTheirOwnReplies(t *testing.T) {
	sb := newRoleSandbox(t)
	ctx := context.Background()
	const files = 16
	for i := range files {
		if err := sb.Files.Write(ctx, fmt.Sprintf("f%d.txt", i), []byte(strings.Repeat(strconv.Itoa(i), 100+i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stream struct {
		res *Result
		err error
	}
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		stream.res, stream.err = sb.Commands.Run(ctx, Command{Shell: "for i in $(seq 1 2000); do echo line$i; done"})
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 50 {
				i := (g*7 + k) % files
				got, err := sb.Files.ReadFile(ctx, fmt.Sprintf("f%d.txt", i))
				if want := strings.Repeat(strconv.Itoa(i), 100+i); err != nil || string(got) != want {
					errs <- fmt.Errorf("goroutine %d call %d read f%d.txt: %q %v", g, k, i, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	<-streamDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if stream.err != nil {
		t.Fatalf("the streaming command beside them: %v", stream.err)
	}
	if out := string(stream.res.Stdout); strings.Count(out, "\n") != 2000 || !strings.HasSuffix(out, "line2000\n") {
		t.Errorf("the streaming command beside them: %d lines", strings.Count(out, "\n"))
	}
}

// An agent that dies while nothing is asked of it is seen by the client
// on its own (Pool relies on it), after calls that read their own
// replies left the stream.
func TestRealAgentIdleClientSeesTheAgentDie(t *testing.T) {
	sb := newRoleSandbox(t)
	ctx := context.Background()
	for range 5 {
		if _, err := sb.Files.Stat(ctx, "."); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(agentPID(t, sb), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for sb.client.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the client did not see its agent die")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Close during a call that reads its own reply ends it with SBX_CLOSED
// and leaves no goroutine of the client behind.
func TestRealAgentCloseEndsADirectCall(t *testing.T) {
	before := runtime.NumGoroutine()
	sb, err := New(context.Background(), AllowWeaker(TierLandlock, TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	job, err := sb.Commands.Start(ctx, Command{Args: []string{"sleep", "60"}})
	if err != nil {
		sb.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := job.Wait(ctx)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // the Wait is reading
	sb.Close()
	select {
	case err := <-done:
		if c := CodeOf(err); c != CodeClosed && c != CodeDead {
			t.Errorf("Job.Wait cut by Close: %v, want SBX_CLOSED", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end a Job.Wait in progress")
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
