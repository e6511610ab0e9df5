package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// buildExample compiles the example program, so the test runs the real binary.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func args(v map[string]string) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

const (
	primesCode = "primes = [n for n in range(2, 100) if all(n % d for d in range(2, int(n ** 0.5) + 1))]\nprint(len(primes), sum(primes))"
	saveCode   = "with open('primes.txt', 'w') as f:\n    f.write('\\n'.join(map(str, primes)) + '\\n')"
	answer     = "There are 25 primes below 100, and they sum to 1060. They are in primes.txt, one per line."
)

// TestExampleAgainstScriptedServer runs the example program, pointed by OPENAI_BASE_URL at the
// scripted server, through its default task. The "model" computes the primes in Python and,
// in the same turn, looks at the sandbox's environment (parallel calls, streamed with
// interleaved fragments); then saves them from the same Python state and checks the file.
// The server checks every result, and that the API key in the program's environment did not
// reach the sandbox.
func TestExampleAgainstScriptedServer(t *testing.T) {
	// Skip (or, in CI, fail) where the example's default sandbox cannot be made.
	sandboxtest.NewDefault(t).Close()
	bin := buildExample(t)

	// Without a key the program explains what to set instead of calling out.
	noKey := exec.Command(bin)
	noKey.Env = append(os.Environ(), "OPENAI_API_KEY=")
	if out, err := noKey.CombinedOutput(); err == nil || !strings.Contains(string(out), "set OPENAI_API_KEY") {
		t.Errorf("without a key: %v, %s; want a failure that says to set OPENAI_API_KEY", err, out)
	}

	const key = "sk-example-test-key"
	srv := openaitest.New(t,
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := req.Header.Get("Authorization"); got != "Bearer "+key {
				t.Errorf("Authorization = %q; want the key from OPENAI_API_KEY", got)
			}
			if req.Chat.Model != "gpt-4o-mini" || !req.Chat.Stream || len(req.Chat.Tools) != 17 {
				t.Errorf("model %q, stream %v, %d tools; want gpt-4o-mini, streamed, the 17 built-ins", req.Chat.Model, req.Chat.Stream, len(req.Chat.Tools))
			}
			if got := req.LastMessage().Content; got != defaultTask {
				t.Errorf("task = %q", got)
			}
			return openaitest.Reply{FragmentSize: 5, ToolCalls: []openaitest.ToolCall{
				{ID: "py", Name: "run_python", Arguments: args(map[string]string{"code": primesCode})},
				{ID: "env", Name: "run_command", Arguments: args(map[string]string{"command": "env"})},
			}}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			res := req.ToolResults()
			if !strings.Contains(res["py"], "25 1060") {
				t.Errorf("run_python result = %q; want 25 1060", res["py"])
			}
			if env := res["env"]; !strings.Contains(env, "PATH=") || strings.Contains(env, "OPENAI") || strings.Contains(env, key) {
				t.Errorf("the sandbox's environment = %q; want a minimal one without the host's OPENAI_* variables", env)
			}
			return openaitest.Reply{FragmentSize: 5, ToolCalls: []openaitest.ToolCall{
				{ID: "save", Name: "run_python", Arguments: args(map[string]string{"code": saveCode})},
				{ID: "check", Name: "run_command", Arguments: args(map[string]string{"command": "wc -l < primes.txt; tail -n 1 primes.txt"})},
			}}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			res := req.ToolResults()
			if got := res["save"]; strings.Contains(got, "Error") {
				t.Errorf("saving failed: %q", got)
			}
			if got := res["check"]; !strings.Contains(got, "--- stdout ---\n25\n97") {
				t.Errorf("check of primes.txt = %q; want 25 lines ending with 97", got)
			}
			return openaitest.Text(answer)
		}),
	)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY="+key, "OPENAI_BASE_URL="+srv.URL, "OPENAI_MODEL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("example: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	t.Logf("the example printed:\n%s", out)
	for _, want := range []string{"isolation: namespace", "-> run_python {\"code\":", "-> run_command {\"command\":\"env\"}", "<- exit code: 0", answer + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
