//go:build linux

package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// WorkspaceDir opens another directory as the workspace that requests
// name by the Hello's path: absolute paths under that path reach it, and
// confinement is the opened directory's.
func TestWorkspaceDirServesAnotherDirectoryUnderTheHellosPath(t *testing.T) {
	host := t.TempDir()
	c, _ := servePair(t, ServeOptions{WorkspaceDir: host}, wire.Hello{Workspace: "/workspace", Env: []string{"PATH=/usr/bin:/bin"}})
	ctx := context.Background()
	if err := c.Do(ctx, "fs.write", wire.FSWriteRequest{Path: "/workspace/a/b.txt", Data: []byte("hi")}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(host, "a", "b.txt")); err != nil || string(got) != "hi" {
		t.Fatalf("the file in the opened directory: %q, %v", got, err)
	}
	var e wire.Entry
	if err := c.Do(ctx, "fs.stat", wire.FSPathRequest{Path: "a/b.txt"}, &e); err != nil || e.Size != 2 {
		t.Fatalf("stat by a relative path: %+v %v", e, err)
	}
	err := c.Do(ctx, "fs.write", wire.FSWriteRequest{Path: host + "/x", Data: []byte("x")}, nil)
	if we, ok := err.(*wire.WireError); !ok || we.Code != wire.CodePathEscape {
		t.Fatalf("a write by the opened directory's own path: %v, want %s", err, wire.CodePathEscape)
	}
}

// Observe sees every request's operation and arguments as it arrives,
// and its error as it ends, for requests served inline and by a handler.
func TestObserveSeesEachRequestAndHowItEnded(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	observe := func(op string, args json.RawMessage) func(*wire.WireError) {
		var a struct{ Path string }
		_ = json.Unmarshal(args, &a)
		return func(e *wire.WireError) {
			code := "ok"
			if e != nil {
				code = string(e.Code)
			}
			mu.Lock()
			seen = append(seen, op+" "+a.Path+" "+code)
			mu.Unlock()
		}
	}
	c, _ := servePair(t, ServeOptions{Observe: observe}, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	ctx := context.Background()
	_ = c.Do(ctx, "fs.write", wire.FSWriteRequest{Path: "f.txt", Data: []byte("x")}, nil)
	_ = c.Do(ctx, "fs.read", wire.FSReadRequest{Path: "f.txt"}, nil)   // inline
	_ = c.Do(ctx, "fs.stat", wire.FSPathRequest{Path: "missing"}, nil) // inline, failing
	_ = c.Do(ctx, "fs.mkdir", wire.FSPathRequest{Path: "../out"}, nil) // handler, failing
	mu.Lock()
	defer mu.Unlock()
	want := []string{"fs.write f.txt ok", "fs.read f.txt ok", "fs.stat missing SBX_NOT_FOUND", "fs.mkdir ../out SBX_PATH_ESCAPE"}
	if len(seen) != len(want) {
		t.Fatalf("observed %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("observed %q, want %q", seen, want)
		}
	}
}

// stepClock is a Clock whose timers fire when the test says so.
type stepClock struct {
	asked chan time.Duration
	fire  chan time.Time
}

func (c *stepClock) After(d time.Duration) (<-chan time.Time, func() bool) {
	c.asked <- d
	return c.fire, func() bool { return true }
}

// A command's timeout runs on ServeOptions.Clock: the command ends as
// timed out when that clock's timer fires, not when the wall clock says.
func TestCommandTimeoutRunsOnTheServersClock(t *testing.T) {
	clock := &stepClock{asked: make(chan time.Duration, 1), fire: make(chan time.Time, 1)}
	c, _ := servePair(t, ServeOptions{Clock: clock}, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	call, err := c.Start("exec", wire.ExecRequest{Args: []string{"sleep", "1000"}, TimeoutMs: 3_600_000}, agent.Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-clock.asked:
		if d != time.Hour {
			t.Fatalf("the server asked its clock for a %s timer, want 1h", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server never asked its clock for the command's timeout")
	}
	clock.fire <- time.Time{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := decodeResult[wire.ExecReply](call.WaitContext(ctx))
	if err != nil || !rep.TimedOut {
		t.Fatalf("after the clock's timer fired: %+v, %v; want the command timed out", rep, err)
	}
}
