package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// binaryProcs lists the running processes of the sandboxkit binary under
// test: servers and the agents of their sandboxes (the local backend
// re-executes the binary).
func binaryProcs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == binary {
			out = append(out, pid)
		}
	}
	return out
}

// TestMCPPool: with --pool the session's sandbox comes from the pool, the
// first call works, and when the server exits neither the session's
// sandbox nor the pool's spares are left running.
func TestMCPPool(t *testing.T) {
	if n := len(binaryProcs()); n != 0 {
		t.Fatalf("%d processes of the test binary run before the test", n)
	}
	c, srv := startStdio(t, "--pool", "2")
	if got := c.ok(t, "run_command", map[string]any{"command": "echo pooled; ls -A | wc -l"}); !strings.Contains(got, "pooled") {
		t.Fatalf("run_command through a pooled sandbox: %s", got)
	}
	id, ws := createdSandbox(t, srv, 1)
	sb := plantMarker(t, c, srv, id, ws)
	// The pool keeps spares beside the session's sandbox: one server, its
	// session's agent and at least one spare agent.
	deadline := time.Now().Add(callTimeout)
	for len(binaryProcs()) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(binaryProcs()); n < 3 {
		t.Errorf("with --pool 2 only %d processes of the binary run (server + session agent + spares expected)", n)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("closing the client: %v\n%s", err, srv.log)
	}
	checkGone(t, sb)
	deadline = time.Now().Add(callTimeout)
	for len(binaryProcs()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := binaryProcs(); len(left) > 0 {
		t.Errorf("after the server exited, processes %v of the pool are left; log:\n%s", left, srv.log)
	}
}

func TestMCPPoolRefusesASharedWorkspace(t *testing.T) {
	r := runBinary(t, "", "mcp", "--pool", "2", "--workspace", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "--pool cannot be used with --workspace") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
