//go:build linux

package server

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// execOut runs req and returns its reply and stdout.
func execOut(t *testing.T, c *agent.Client, req wire.ExecRequest) (wire.ExecReply, string, error) {
	t.Helper()
	var mu sync.Mutex
	var out bytes.Buffer
	call, err := c.Start("exec", req, agent.Handlers{OnData: func(ft wire.FrameType, b []byte) {
		if ft == wire.FrameStdout {
			mu.Lock()
			out.Write(b)
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := decodeResult[wire.ExecReply](call.WaitContext(ctx))
	mu.Lock()
	defer mu.Unlock()
	return rep, out.String(), err
}

// The server is the same with another Runner behind the seam: the plain
// os/exec runner (the default where there is no Linux runner) runs
// commands, streams their output, reports exit codes and timeouts.
func TestServerWithPlainRunner(t *testing.T) {
	c, _ := servePair(t, ServeOptions{Runner: runner.Plain()}, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	rep, out, err := execOut(t, c, wire.ExecRequest{Args: []string{"sh", "-c", "echo hello; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if out != "hello\n" || rep.ExitCode != 3 {
		t.Fatalf("got %q, exit %d; want \"hello\\n\", exit 3", out, rep.ExitCode)
	}
	rep, _, err = execOut(t, c, wire.ExecRequest{Args: []string{"sleep", "30"}, TimeoutMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.TimedOut || rep.DurationNs > int64(20*time.Second) {
		t.Fatalf("sleep 30 with a 100 ms timeout: %+v", rep)
	}
}

// A runner that cannot apply a limit refuses the command: the plain runner
// has no rlimits, so a sandbox asking for them runs nothing (a control
// not in force is never reported as one).
func TestPlainRunnerRefusesRlimits(t *testing.T) {
	hello := wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"},
		Rlimits: []wire.Rlimit{{Resource: 0, Name: "RLIMIT_CPU", Soft: 10, Hard: 10}}}
	c, _ := servePair(t, ServeOptions{Runner: runner.Plain()}, hello)
	_, out, err := execOut(t, c, wire.ExecRequest{Args: []string{"echo", "ran"}})
	if wireCode(err) != wire.CodeExec || !strings.Contains(err.Error(), "RLIMIT_CPU") {
		t.Fatalf("exec with an rlimit the runner cannot apply: err %v, output %q; want a %s error naming RLIMIT_CPU", err, out, wire.CodeExec)
	}
}

// TestLookPathTakesTheFirstExecutableFile: a program is found on the
// sandbox's PATH as a shell finds it — the first entry holding a regular
// file with an execute bit, through a symbolic link too; a directory or a
// file without an execute bit by that name is passed over (the test each
// entry gets, isExecutable, is a raw statx on Linux).
func TestLookPathTakesTheFirstExecutableFile(t *testing.T) {
	root := t.TempDir()
	dirs := []string{"asdir", "noexec", "link", "real"}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(root, "asdir", "prog"), 0o755))
	must(os.WriteFile(filepath.Join(root, "noexec", "prog"), []byte("#!/bin/sh\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "real", "prog"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Symlink(filepath.Join(root, "real", "prog"), filepath.Join(root, "link", "prog")))
	var path []string
	for _, d := range dirs {
		path = append(path, filepath.Join(root, d))
	}
	env := []string{"PATH=" + strings.Join(path, ":")}
	if got, want := lookPathIn("prog", env), filepath.Join(root, "link", "prog"); got != want {
		t.Errorf("lookPathIn(prog) = %q, want %q (the first entry with an executable file)", got, want)
	}
	if got := lookPathIn("prog", []string{"PATH=" + strings.Join(path[:2], ":")}); got != "" {
		t.Errorf("lookPathIn(prog) over a directory and a non-executable file = %q, want none", got)
	}
	if got := lookPathIn("missing", env); got != "" {
		t.Errorf("lookPathIn(missing) = %q, want none", got)
	}
}
