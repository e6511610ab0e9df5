package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
)

// buildExample builds this example's binary, for tests that run it as a user does.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentloop")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	return bin
}

// ptyOutput collects what the program writes to its terminal.
type ptyOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (p *ptyOutput) String() string { p.mu.Lock(); defer p.mu.Unlock(); return p.buf.String() }

// waitFor waits until the output holds want n times.
func (p *ptyOutput) waitFor(t *testing.T, want string, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Count(p.String(), want) >= n {
			return
		}
	}
	t.Fatalf("the terminal never showed %q %d times; it shows:\n%s", want, n, p.String())
}

// TestApprovalPromptOnTheTerminal runs the example on a pseudo-terminal with a rule that asks
// before touch, and answers its prompts as a person would: once, deny, always. The prompt
// shows the command as the policy parsed it; each answer decides what runs; after "always"
// it does not ask again.
func TestApprovalPromptOnTheTerminal(t *testing.T) {
	bin := buildExample(t)
	call := func(cmd string) openaitest.Reply {
		return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{Name: "run_command", Arguments: `{"command":"` + cmd + `"}`}}}
	}
	srv := openaitest.New(t, call("touch once.txt"), call("env touch denied.txt"), call("touch always.txt"),
		call("touch again.txt"), openaitest.Text("Made the files I was allowed to."))
	ws := workspace(t)
	cmd := exec.Command(bin, "--base-url", srv.URL, "--api-key", "k", "--workspace", ws, "--ask-command", "touch", "--color", "never", "make files")
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer tty.Close()
	var out ptyOutput
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		b := make([]byte, 4096)
		for {
			n, err := tty.Read(b)
			out.mu.Lock()
			out.buf.Write(b[:n])
			out.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })

	const prompt = "allow [o]nce, [a]lways, or [d]eny? "
	for i, answer := range []string{"o", "d", "a"} {
		out.waitFor(t, prompt, i+1)
		tty.Write([]byte(answer + "\n"))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the example failed: %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the example did not finish:\n%s", out.String())
	}
	// The program has exited, but its last lines may still be in the
	// terminal's buffer: read until the terminal ends (EIO once every
	// holder of its other side is gone). CI saw the final answer missing.
	select {
	case <-readerDone:
	case <-time.After(10 * time.Second):
	}
	text := out.String()
	t.Logf("terminal:\n%s", text)
	if n := strings.Count(text, prompt); n != 3 {
		t.Errorf("asked %d times, want 3 (the fourth touch was allowed always)", n)
	}
	for _, want := range []string{
		"? approval needed: run_command",
		"runs  touch denied.txt (via env)",
		`why   rule ask command "touch" matched touch once.txt`,
		"Made the files I was allowed to.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the terminal lacks %q", want)
		}
	}
	for name, want := range map[string]bool{"once.txt": true, "denied.txt": false, "always.txt": true, "again.txt": true} {
		_, err := os.Stat(filepath.Join(ws, name))
		if got := err == nil; got != want {
			t.Errorf("%s exists: %v, want %v", name, got, want)
		}
	}
	// The model was told who refused, in tool terms.
	refusal := srv.Requests()[2].ToolResults()["call_2_0"] // the second step's call
	if !strings.Contains(refusal, "run_command was not run") || !strings.Contains(refusal, "denied it") {
		t.Errorf("the model was told %q for the denied call", refusal)
	}
}

// TestApprovalWithoutATerminalIsARefusal: with no terminal on stdin nobody can answer, so a
// call the policy asks about is refused at once (not left waiting) and the model is told why.
func TestApprovalWithoutATerminalIsARefusal(t *testing.T) {
	bin := buildExample(t)
	srv := openaitest.New(t, openaitest.Call("run_command", `{"command":"touch x"}`), openaitest.Text("ok"))
	ws := workspace(t)
	cmd := exec.CommandContext(context.Background(), bin, "--base-url", srv.URL, "--api-key", "k", "--workspace", ws, "--ask-command", "touch", "task")
	cmd.Stdin = strings.NewReader("o\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(ws, "x")); err == nil {
		t.Errorf("the call ran although nobody could approve it")
	}
	for _, r := range srv.Requests()[1].ToolResults() {
		if !strings.Contains(r, "no terminal to ask on") {
			t.Errorf("the model was told %q", r)
		}
	}
}
