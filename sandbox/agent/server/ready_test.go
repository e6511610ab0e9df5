//go:build linux

// The agent serves only on Linux (hardenProcess refuses elsewhere), so the
// tests that run one are Linux-only.

package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// TestNoProcessStartsBeforeProcessesReady: while ServeOptions.ProcessesReady
// is open the agent answers file requests but starts no process (the local
// backend warms the threads a fork bomb would starve it of meanwhile); once
// it closes, the held command runs.
func TestNoProcessStartsBeforeProcessesReady(t *testing.T) {
	dir := t.TempDir()
	ready := make(chan struct{})
	c, _ := servePair(t, ServeOptions{ProcessesReady: ready}, wire.Hello{Workspace: dir, Env: []string{"PATH=/usr/bin:/bin"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	call, err := c.Start("exec", wire.ExecRequest{Args: []string{"/bin/sh", "-c", "echo ran > marker"}, TimeoutMs: 60000}, agent.Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	// Requests that start no process are served meanwhile. An ungated
	// command runs within milliseconds; a second of stat round trips
	// without the marker (or a reply) shows it is held.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		err := c.Do(ctx, "fs.stat", wire.FSPathRequest{Path: "marker"}, nil)
		if err == nil {
			t.Fatal("a command ran before ProcessesReady was closed")
		}
		if wireCode(err) != wire.CodeNotFound {
			t.Fatalf("fs.stat while processes are held: %v", err)
		}
		select {
		case <-call.Done():
			t.Fatal("the exec request ended before ProcessesReady was closed")
		default:
		}
	}
	close(ready)
	if _, err := call.WaitContext(ctx); err != nil {
		t.Fatalf("exec after ProcessesReady closed: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "marker")); err != nil || string(data) != "ran\n" {
		t.Fatalf("the held command did not run once released: %q, %v", data, err)
	}
}
