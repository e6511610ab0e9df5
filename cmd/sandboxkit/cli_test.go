package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the built binary as a script would and check what a
// script relies on: exit codes, and output on the right stream.

func TestRunPassesThroughExitCodeAndOutput(t *testing.T) {
	iso := isolationFlags(t)
	tests := []struct {
		name           string
		stdin          string
		cmd            []string
		code           int
		stdout, stderr string // stderr: exact, unless stderrHas is set
		stderrHas      string
	}{
		{name: "exit code and both streams", cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 3"},
			code: 3, stdout: "out\n", stderr: "err\n"},
		{name: "success", cmd: []string{"echo", "hello", "world"}, code: 0, stdout: "hello world\n"},
		{name: "arguments are argv, not a shell line", cmd: []string{"printf", "%s|", "a b", "$HOME", ";"},
			code: 0, stdout: "a b|$HOME|;|"},
		{name: "stdin is passed", stdin: "shout\n", cmd: []string{"tr", "a-z", "A-Z"}, code: 0, stdout: "SHOUT\n"},
		{name: "killed by a signal is 128+N", cmd: []string{"sh", "-c", "echo before; kill -KILL $$"},
			code: 128 + 9, stdout: "before\n"},
		{name: "command not found is 127", cmd: []string{"no-such-program-here"},
			code: 127, stderrHas: "no-such-program-here"},
		{name: "host environment does not leak in", cmd: []string{"sh", "-c", "echo ${SANDBOXKIT_TEST_SECRET:-unset}"},
			code: 0, stdout: "unset\n"},
	}
	os.Setenv("SANDBOXKIT_TEST_SECRET", "leaked") // inherited by the binary, must stop there
	defer os.Unsetenv("SANDBOXKIT_TEST_SECRET")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run"}, iso...), "--")
			r := runBinary(t, tc.stdin, append(args, tc.cmd...)...)
			if r.code != tc.code || r.stdout != tc.stdout {
				t.Errorf("exit %d, stdout %q; want exit %d, stdout %q (stderr %q)", r.code, r.stdout, tc.code, tc.stdout, r.stderr)
			}
			if tc.stderrHas != "" {
				if !strings.Contains(r.stderr, tc.stderrHas) {
					t.Errorf("stderr %q does not mention %q", r.stderr, tc.stderrHas)
				}
			} else if r.stderr != tc.stderr {
				t.Errorf("stderr %q, want exactly %q (sandboxkit must add nothing)", r.stderr, tc.stderr)
			}
		})
	}
}

func TestRunTimeoutExits124(t *testing.T) {
	r := runBinary(t, "", append(append([]string{"run", "--timeout", "1s"}, isolationFlags(t)...),
		"--", "sh", "-c", "echo started; sleep 60; echo never")...)
	if r.code != 124 {
		t.Fatalf("exit %d, want 124 (timed out); stderr %q", r.code, r.stderr)
	}
	if r.stdout != "started\n" {
		t.Errorf("stdout %q, want the output before the timeout, %q", r.stdout, "started\n")
	}
	if !strings.Contains(r.stderr, "timeout") {
		t.Errorf("stderr %q does not say the command timed out", r.stderr)
	}
}

func TestRunWorkspaceFlag(t *testing.T) {
	// Not t.TempDir: its parent is mode 700, and the sandbox's own
	// unprivileged uid must be able to reach the workspace.
	dir, err := os.MkdirTemp("", "sandboxkit-run-ws-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from the host\n"), 0o644)
	r := runBinary(t, "", append(append([]string{"run", "--workspace", dir}, isolationFlags(t)...),
		"--", "sh", "-c", "cat in.txt; echo made inside > out.txt")...)
	if r.code != 0 || r.stdout != "from the host\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "made inside\n" {
		t.Errorf("the file written inside is not in --workspace: %q, %v", b, err)
	}
}

func TestRunInterruptStopsTheCommand(t *testing.T) {
	marker := fmt.Sprintf("SBK_RUN_MARKER_%d", time.Now().UnixNano())
	args := append(append([]string{"run"}, isolationFlags(t)...), "--", "sh", "-c", "export "+marker+"=1; echo ready; sleep 300")
	cmd := exec.Command(binary, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("the command did not start: %q, %v", buf, err)
	}
	var marked []procID
	for deadline := time.Now().Add(30 * time.Second); len(marked) < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		marked = markedProcs(marker)
	}
	if len(marked) == 0 {
		t.Fatal("the command's processes are not visible on the host")
	}
	procs := sandboxProcs(t, cmd.Process.Pid, marked)
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(callTimeout):
		t.Fatal("sandboxkit run did not stop on SIGINT")
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 130 {
		t.Errorf("after SIGINT: %v, want exit status 130", werr)
	}
	if left := waitGone(procs); len(left) > 0 {
		t.Errorf("processes outlived the interrupted run:\n%s", strings.Join(left, "\n"))
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	tests := []struct {
		name string
		args []string
		hint string // what stderr must point to
	}{
		{"no command at all", nil, "Usage:"},
		{"unknown command", []string{"launch"}, `unknown command "launch"`},
		{"run without a command", []string{"run"}, "sandboxkit run --help"},
		{"run with only --", []string{"run", "--"}, "no command given"},
		{"unknown flag", []string{"run", "--bogus", "--", "true"}, "-bogus"},
		{"bad duration", []string{"run", "--timeout", "soon", "--", "true"}, "timeout"},
		{"non-positive timeout", []string{"run", "--timeout", "0s", "--", "true"}, "timeout"},
		{"unknown backend", []string{"run", "--backend", "vm", "--", "true"}, "--backend"},
		{"tier that is not weaker", []string{"run", "--allow-weaker", "container", "--", "true"}, "--allow-weaker"},
		{"missing workspace", []string{"run", "--workspace", "/no/such/dir", "--", "true"}, "--workspace"},
		{"mcp with arguments", []string{"mcp", "serve"}, "unexpected arguments"},
		{"mcp unknown flag", []string{"mcp", "--port", "80"}, "-port"},
		{"mcp negative --ttl", []string{"mcp", "--ttl", "-1s"}, "--ttl"},
		{"mcp --http on every interface", []string{"mcp", "--http", "0.0.0.0:0"}, "--allow-remote"},
		{"mcp --http without a host", []string{"mcp", "--http", ":0"}, "--allow-remote"},
		{"mcp --http without a port", []string{"mcp", "--http", "127.0.0.1"}, "HOST:PORT"},
		{"doctor with arguments", []string{"doctor", "now"}, "unexpected arguments"},
		{"demo with arguments", []string{"demo", "fast"}, "unexpected arguments"},
		{"gc with arguments", []string{"gc", "all"}, "unexpected arguments"},
		{"gc negative --older-than", []string{"gc", "--older-than", "-1h"}, "--older-than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runBinary(t, "", tc.args...)
			if r.code != 2 {
				t.Errorf("sandboxkit %s: exit %d, want 2 (usage); stderr %q", strings.Join(tc.args, " "), r.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("a usage error wrote to stdout: %q", r.stdout)
			}
			if !strings.Contains(r.stderr, tc.hint) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.hint)
			}
		})
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, c := range commands {
		for _, flag := range []string{"--help", "-h"} {
			t.Run(c.name+" "+flag, func(t *testing.T) {
				r := runBinary(t, "", c.name, flag)
				if r.code != 0 || r.stderr != "" {
					t.Errorf("exit %d, stderr %q; want 0 and nothing on stderr", r.code, r.stderr)
				}
				if want := "Usage:\n  sandboxkit " + c.name; !strings.HasPrefix(r.stdout, want) {
					t.Errorf("stdout does not start with %q:\n%s", want, r.stdout)
				}
				if strings.Count(r.stdout, "Usage:") != 1 {
					t.Errorf("usage printed %d times:\n%s", strings.Count(r.stdout, "Usage:"), r.stdout)
				}
			})
		}
	}
	r := runBinary(t, "", "help", "run")
	if r.code != 0 || !strings.Contains(r.stdout, "124") || !strings.Contains(r.stdout, "--timeout") && !strings.Contains(r.stdout, "-timeout") {
		t.Errorf("help run: exit %d, stdout %q; want run's usage with its exit codes and flags", r.code, r.stdout)
	}
	r = runBinary(t, "", "--help")
	if r.code != 0 {
		t.Errorf("--help: exit %d", r.code)
	}
	for _, c := range commands {
		if !strings.Contains(r.stdout, "  "+c.name+" ") {
			t.Errorf("--help does not list %s:\n%s", c.name, r.stdout)
		}
	}
}

func TestDoctorExitCode(t *testing.T) {
	r := runBinary(t, "", "doctor")
	picks := strings.Contains(r.stdout, "sandbox.New      picks ")
	fails := strings.Contains(r.stdout, "sandbox.New      fails: ")
	switch {
	case r.code == 0 && picks && !fails:
	case r.code == 1 && fails && !picks:
		if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "namespace") {
			t.Errorf("SANDBOXKIT_REQUIRE has namespace but doctor cannot create a strict sandbox:\n%s", r.stdout)
		}
	default:
		t.Fatalf("exit %d does not match the report (picks %v, fails %v):\n%s%s", r.code, picks, fails, r.stdout, r.stderr)
	}
	for _, line := range []string{"user namespaces ", "landlock ", "seccomp ", "best buildable "} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("doctor does not report %q:\n%s", strings.TrimSpace(line), r.stdout)
		}
	}
	if r.code == 0 {
		// A strict sandbox is the namespace tier or stronger.
		tier := strings.Fields(r.stdout[strings.Index(r.stdout, "picks ")+len("picks "):])[0]
		if tier != "namespace" && tier != "container" && tier != "gvisor" && tier != "microvm" {
			t.Errorf("doctor exits 0 but the default sandbox is only %q", tier)
		}
	}
}

func TestDemoRuns(t *testing.T) {
	r := runBinary(t, "", "demo")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"1. create", `stdout "hello from Linux\n"`, `notes.txt -> "written by sandboxkit demo\n"`,
		`output "tick 1\ntick 2\ntick 3\n"`, "6. network    a listener on the host's 127.0.0.1:", "it saw 0 connections", "7. isolation", "network ", "8. close"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestRunLeavesNoProcess(t *testing.T) {
	// After run returns, neither the command nor the sandbox that ran it
	// is left on the host, even when the command started a background
	// process that would outlive it.
	marker := fmt.Sprintf("SBK_RUN_BG_%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	args := append(append([]string{"run"}, isolationFlags(t)...), "--", "sh", "-c", "export "+marker+"=1; (sleep 300 &) ; echo started")
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if err != nil || string(out) != "started\n" {
		t.Fatalf("run: %v, output %q", err, out)
	}
	var left []procID
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left = markedProcs(marker); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range left {
		t.Errorf("process %d (%s) outlived sandboxkit run", p.pid, cmdline(p))
		if pr, err := os.FindProcess(p.pid); err == nil {
			pr.Kill()
		}
	}
}

func TestRunPassesLongOutputWhole(t *testing.T) {
	// Output is passed through as it comes: a few hundred KB arrive whole
	// and in order, interleaved with nothing from sandboxkit.
	r := runBinary(t, "", append(append([]string{"run"}, isolationFlags(t)...), "--", "seq", "1", "60000")...)
	var want strings.Builder
	for i := 1; i <= 60000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if r.code != 0 || r.stdout != want.String() || r.stderr != "" {
		t.Errorf("seq 1 60000: exit %d, %d bytes of stdout (want %d, equal: %v), stderr %q", r.code, len(r.stdout), want.Len(), r.stdout == want.String(), r.stderr)
	}
}

func TestGCRemovesTheWorkspaceOfAKilledRun(t *testing.T) {
	// A run killed with SIGKILL cannot remove its temporary workspace (its
	// sandbox's processes die with it); gc finds and removes it, and keeps
	// the workspace of a run that is still going.
	tmp := t.TempDir()
	// The namespace tier maps the sandbox to another uid, which must be able
	// to reach the workspace through its parent directories.
	for d := tmp; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	env := append(os.Environ(), "TMPDIR="+tmp)
	start := func() (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.Command(binary, append(append([]string{"run"}, isolationFlags(t)...), "--", "sleep", "300")...)
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for deadline := time.Now().Add(callTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if m, _ := filepath.Glob(filepath.Join(tmp, fmt.Sprintf("sandboxkit-ws-%d-*", cmd.Process.Pid))); len(m) == 1 {
				return cmd, m[0]
			}
		}
		t.Fatalf("run (pid %d) made no workspace in %s", cmd.Process.Pid, tmp)
		return nil, ""
	}
	killed, killedWS := start()
	_, liveWS := start()
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()

	gc := exec.Command(binary, "gc")
	// No engine for gc: it would remove the containers of the docker
	// backend's tests running beside this one.
	gc.Env = append(env, "DOCKER_HOST=unix://"+filepath.Join(tmp, "no-docker.sock"))
	out, err := gc.Output()
	if err != nil {
		t.Fatalf("gc: %v, output %q", err, out)
	}
	if !strings.Contains(string(out), "removed workspace "+killedWS) || strings.Contains(string(out), "removed container") {
		t.Errorf("gc did not report removing %s:\n%s", killedWS, out)
	}
	if _, err := os.Stat(killedWS); !os.IsNotExist(err) {
		t.Errorf("the killed run's workspace %s is still there: %v", killedWS, err)
	}
	if _, err := os.Stat(liveWS); err != nil {
		t.Errorf("gc removed the workspace of a run still going: %v", err)
	}
}
