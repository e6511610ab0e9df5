package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// poolOptions are the options of the pool tests' sandboxes: the namespace
// tier where CI requires it, anything the machine has otherwise.
func poolOptions() []sandbox.Option {
	if sandboxtest.Required("namespace") {
		return []sandbox.Option{sandbox.RequireIsolation(sandbox.TierNamespace)}
	}
	return []sandbox.Option{sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)}
}

// agentProcs lists the processes running this test binary other than the
// test itself: the agents of sandboxes (the local backend re-executes the
// binary), whatever their state.
func agentProcs(t *testing.T) []int {
	t.Helper()
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == self {
			out = append(out, pid)
		}
	}
	return out
}

func TestPoolRefusesASharedWorkspace(t *testing.T) {
	_, err := sandbox.NewPool(context.Background(), sandbox.PoolConfig{Size: 1}, sandbox.WithWorkspace(t.TempDir()))
	if sandbox.CodeOf(err) != sandbox.CodeInvalidArgument || !strings.Contains(err.Error(), "own") {
		t.Fatalf("NewPool with WithWorkspace: %v; want SBX_INVALID_ARGUMENT saying each pooled sandbox gets its own workspace", err)
	}
}

func TestPoolRefusesABadPythonImport(t *testing.T) {
	_, err := sandbox.NewPool(context.Background(), sandbox.PoolConfig{PythonImports: []string{"os; import shutil"}})
	if sandbox.CodeOf(err) != sandbox.CodeInvalidArgument {
		t.Fatalf("NewPool with a statement as a module name: %v; want SBX_INVALID_ARGUMENT", err)
	}
}

// TestPoolUnderLoad is the load test (sandboxtest.RunPoolLoad): 50
// concurrent Gets on a pool of 8; after Close no agent process and no
// temporary workspace is left.
func TestPoolUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 58 sandboxes; skipped with -short")
	}
	// The sandbox's uid must reach its workspace: a directory under /tmp
	// searchable by others, not t.TempDir (mode 700).
	tmp, err := os.MkdirTemp("", "pooltest-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o755)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp) // the local backend's temporary workspaces go here
	before := len(agentProcs(t))
	sandboxtest.RunPoolLoad(t, sandboxtest.PoolLoadOptions{Size: 8, Callers: 50, MaxStarting: 2, Timeout: 3 * time.Minute,
		Leftovers: func() []string {
			var left []string
			if n := len(agentProcs(t)); n > before {
				left = append(left, fmt.Sprintf("%d agent processes (had %d before)", n, before))
			}
			ws, _ := filepath.Glob(filepath.Join(tmp, "sandboxkit-ws-*"))
			for _, w := range ws {
				left = append(left, "workspace "+w)
			}
			return left
		}}, poolOptions()...)
}

// TestPoolReplacesDeadSandboxes: a pooled sandbox whose agent died while it
// waited is never handed out.
func TestPoolReplacesDeadSandboxes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: 1}, poolOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Wait until the one sandbox is ready, then kill every agent: the pool
	// holds a sandbox that is dead, or dying. Get comes at once, before
	// the agent may even have run its exit, let alone before the pool's
	// reader or reaper noticed: Get must find out for itself.
	eventuallyTrue(t, "the pool's first sandbox to start", func() bool { return len(agentProcs(t)) >= 1 })
	time.Sleep(200 * time.Millisecond)
	for _, pid := range agentProcs(t) {
		p, _ := os.FindProcess(pid)
		p.Kill()
	}
	sb, err := pool.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "echo alive"})
	if err != nil || strings.TrimSpace(res.Stdout) != "alive" {
		t.Fatalf("the sandbox Get returned after its predecessor died: %v %+v", err, res)
	}
}

// TestPoolRefillsAfterAGet: with no other Get waiting, the replacement
// starts after a short hold (so as not to compete with the caller's first
// command), but it does start: the pool is full again.
func TestPoolRefillsAfterAGet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := len(agentProcs(t))
	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: 2}, poolOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	eventuallyTrue(t, "the pool's two sandboxes to start", func() bool { return len(agentProcs(t)) >= before+2 })
	sb, err := pool.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("true in the pooled sandbox: %v %+v", err, res)
	}
	// The caller's sandbox and two ready ones.
	eventuallyTrue(t, "the replacement to start", func() bool { return len(agentProcs(t)) >= before+3 })
}

// TestPoolPreloadsPython: with PythonImports the default context already
// has the modules when Get returns, and contexts are forked from the
// template.
func TestPoolPreloadsPython(t *testing.T) {
	sandboxtest.NewDefault(t) // skips (or fails in CI) without python3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: 1, PythonImports: []string{"json", "xml.dom"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	sb, err := pool.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	// The default context is forked from the template of
	// WithPythonImports, and so is a new one.
	probe := "import sys, os\n'json' in sys.modules and 'xml.dom' in sys.modules and json.__name__ == 'json' and " +
		"b'template' in open('/proc/%d/cmdline' % os.getppid(), 'rb').read()"
	for _, name := range []string{"", "second"} {
		if name != "" {
			if err := sb.Python.Create(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		ex, err := sb.Python.Run(ctx, probe, sandbox.PythonRunOptions{Context: name})
		if err != nil {
			t.Fatal(err)
		}
		if ex.Result == nil || !strings.Contains(ex.Result.Plain(), "True") {
			t.Fatalf("context %q: the modules were not imported, or it was not forked from the template: %+v", name, ex)
		}
	}
}

// TestPooledSandboxesPassTheContract runs the contract suite on sandboxes
// from a pool: a pooled sandbox is a fresh one. Tests that need their own
// options (limits, a workspace) get a cold sandbox with them.
func TestPooledSandboxesPassTheContract(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole contract suite; skipped with -short")
	}
	ctx := context.Background()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: 4}, poolOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	sandboxtest.RunContract(t, pooledFactory(pool))
}

func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPooledSandboxesPassTheEscapeSuite: a pooled sandbox holds every
// control a fresh one holds.
func TestPooledSandboxesPassTheEscapeSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole escape suite; skipped with -short")
	}
	pool, err := sandbox.NewPool(context.Background(), sandbox.PoolConfig{Size: 4}, poolOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	sandboxtest.RunEscape(t, pooledFactory(pool))
}

// pooledFactory hands out the pool's sandboxes; a test that needs options
// of its own (limits, a workspace) gets a cold sandbox with them, since a
// pool has one configuration.
func pooledFactory(pool *sandbox.Pool) sandboxtest.Factory {
	return func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if len(opts) > 0 {
			sb, err := sandbox.New(ctx, append(poolOptions(), opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return sb
		}
		sb, err := pool.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
}
