package agentloop_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/agentloop"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// newPool returns a pool of real sandboxes (the strongest tier the machine has: these tests
// are about who gets which sandbox, not isolation), closed when the test ends.
func newPool(t *testing.T, size int) *sandbox.Pool {
	t.Helper()
	pool, err := sandbox.NewPool(context.Background(), sandbox.PoolConfig{Size: size},
		sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// leaveAMark is a model that lists the workspace, leaves a file in it, then answers with
// what the listing showed.
func leaveAMark() openaitest.Step {
	return openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
		for _, out := range req.ToolResults() {
			return openaitest.Text("listing: " + out)
		}
		return openaitest.Call("run_command", `{"command":"ls -A; echo mine > mark.txt"}`)
	})
}

// closed reports whether sb refuses work because it was closed.
func closed(sb *sandbox.Sandbox) bool {
	_, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"true"}})
	return sandbox.CodeOf(err) == sandbox.CodeClosed
}

func TestSandboxesGiveEveryRunAFreshSandboxAndCloseIt(t *testing.T) {
	pool := newPool(t, 2)
	srv := openaitest.New(t, leaveAMark(), leaveAMark(), leaveAMark(), leaveAMark())
	a, _ := newAgent(srv, nil)
	a.Sandboxes = pool

	var seen []*sandbox.Sandbox
	for i := range 2 {
		res, err := a.Run(context.Background(), "look around")
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if res.Reason != agentloop.StopAnswered || res.ToolCalls != 1 {
			t.Fatalf("run %d ended %s after %d tool calls", i+1, res.Reason, res.ToolCalls)
		}
		// The second run must not see what the first one left.
		if strings.Contains(res.Answer, "mark.txt") {
			t.Errorf("run %d found a file of an earlier run: %q", i+1, res.Answer)
		}
		if res.Sandbox == nil {
			t.Fatalf("run %d: Result.Sandbox is nil", i+1)
		}
		if !closed(res.Sandbox) {
			t.Errorf("run %d: its sandbox is still open after Run returned", i+1)
		}
		if ws := res.Sandbox.Info().HostWorkspace; ws != "" {
			if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("run %d: its workspace %s is still there after Run (%v)", i+1, ws, err)
			}
		}
		seen = append(seen, res.Sandbox)
	}
	if seen[0] == seen[1] || seen[0].ID() == seen[1].ID() {
		t.Errorf("both runs got sandbox %s", seen[0].ID())
	}
}

func TestKeepSandboxLeavesTheRunsSandboxToTheCaller(t *testing.T) {
	pool := newPool(t, 1)
	srv := openaitest.New(t, leaveAMark(), leaveAMark())
	a, _ := newAgent(srv, nil)
	a.Sandboxes = pool
	a.KeepSandbox = true
	subsets := 0
	a.ToolsFor = func(sb *sandbox.Sandbox) (*toolkit.Toolkit, error) {
		subsets++
		return toolkit.ForSandbox(sb).Subset("run_command")
	}
	res, err := a.Run(context.Background(), "look around")
	if err != nil {
		t.Fatal(err)
	}
	if subsets != 1 {
		t.Errorf("ToolsFor ran %d times, want once per run", subsets)
	}
	sb := res.Sandbox
	if sb == nil {
		t.Fatal("Result.Sandbox is nil")
	}
	defer sb.Close()
	// The caller can grade what the run left.
	got, err := sb.Files.Read(context.Background(), "mark.txt", sandbox.ReadOptions{})
	if err != nil || string(got.Data) != "mine\n" {
		t.Errorf("mark.txt in the kept sandbox: %+v, %v", got, err)
	}
}

func TestConcurrentRunsGetASandboxEach(t *testing.T) {
	pool := newPool(t, 2)
	srv := openaitest.New(t, leaveAMark(), leaveAMark(), leaveAMark(), leaveAMark(), leaveAMark(), leaveAMark())
	a, _ := newAgent(srv, nil)
	a.OnEvent = nil // the event log is not safe for concurrent runs
	a.Sandboxes = pool
	a.KeepSandbox = true
	var wg sync.WaitGroup
	results := make([]*agentloop.Result, 3)
	errs := make([]error, 3)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = a.Run(context.Background(), "look around") })
	}
	wg.Wait()
	ids := map[string]bool{}
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("run %d: %v", i, errs[i])
		}
		defer res.Sandbox.Close()
		if strings.Contains(res.Answer, "mark.txt") {
			t.Errorf("run %d saw another run's file: %q", i, res.Answer)
		}
		ids[res.Sandbox.ID()] = true
	}
	if len(ids) != len(results) {
		t.Errorf("%d runs used %d sandboxes", len(results), len(ids))
	}
}

func TestSandboxesMisconfigurationsAreReported(t *testing.T) {
	pool := newPool(t, 1)
	srv := openaitest.New(t)
	tk, _ := adder()

	a, _ := newAgent(srv, tk)
	a.Sandboxes = pool
	if _, err := a.Run(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "both Agent.Tools and Agent.Sandboxes") {
		t.Errorf("Tools and Sandboxes both set: err = %v", err)
	}

	// A failing ToolsFor fails the run before any model call, and the sandbox it was given
	// is not left running.
	a, _ = newAgent(srv, nil)
	a.Sandboxes = pool
	var given *sandbox.Sandbox
	a.ToolsFor = func(sb *sandbox.Sandbox) (*toolkit.Toolkit, error) {
		given = sb
		return toolkit.ForSandbox(sb).Subset("no_such_tool")
	}
	res, err := a.Run(context.Background(), "x")
	if err == nil || !strings.Contains(err.Error(), "Agent.ToolsFor") || res == nil || res.Reason != agentloop.StopError {
		t.Errorf("failing ToolsFor: %+v, %v", res, err)
	}
	if given == nil || !closed(given) {
		t.Errorf("the sandbox given to a failing ToolsFor was not closed")
	}

	// A closed pool is an error that says so.
	pool.Close()
	a.ToolsFor = nil
	res, err = a.Run(context.Background(), "x")
	if sandbox.CodeOf(err) != sandbox.CodeClosed || res == nil || res.Reason != agentloop.StopError {
		t.Errorf("closed pool: %+v, %v (code %s), want %s", res, err, sandbox.CodeOf(err), sandbox.CodeClosed)
	}

	// A cancelled run ends as cancelled, with ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.Sandboxes = newPool(t, 1)
	res, err = a.Run(ctx, "x")
	if !errors.Is(err, context.Canceled) || res == nil || res.Reason != agentloop.StopCanceled {
		t.Errorf("cancelled: %+v, %v", res, err)
	}
}
