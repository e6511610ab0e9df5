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

func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// arg1 wraps arguments the way a model answers the OpenAI functions agent, whose every tool
// takes one string, __arg1.
func arg1(args map[string]any) string {
	return marshal(map[string]string{"__arg1": marshal(args)})
}

const (
	statsCode = "import statistics\nreadings = [18.5, 21, 19.25, 23, 26.25]\nprint(f'mean {statistics.mean(readings):.2f} C, max {max(readings)} C')"
	statsOut  = "mean 21.60 C, max 26.25 C"
	answer    = "The mean is 21.60 C and the maximum 26.25 C; the summary is in summary.txt."
)

// TestExampleAgainstScriptedServer runs the example program, pointed by OPENAI_BASE_URL at the
// scripted server, through its default task. The "model" first gets an argument wrong and
// corrects itself from the observation, then computes with run_python, saves with
// write_file, and reads the file back; the server checks every observation.
func TestExampleAgainstScriptedServer(t *testing.T) {
	// Skip (or, in CI, fail) where the example's default sandbox cannot be made.
	sandboxtest.NewDefault(t).Close()
	bin := filepath.Join(t.TempDir(), "example")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// Without a key the program explains what to set instead of calling out.
	noKey := exec.Command(bin)
	noKey.Env = append(os.Environ(), "OPENAI_API_KEY=")
	if out, err := noKey.CombinedOutput(); err == nil || !strings.Contains(string(out), "set OPENAI_API_KEY") {
		t.Errorf("without a key: %v, %s; want a failure that says to set OPENAI_API_KEY", err, out)
	}

	const key = "sk-example-test-key"
	observation := func(req *openaitest.Request) string {
		m := req.LastMessage()
		if m.Role != "tool" {
			t.Errorf("last message is %s, want the tool's observation", m.Role)
		}
		return m.Content
	}
	srv := openaitest.New(t,
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := req.Header.Get("Authorization"); got != "Bearer "+key {
				t.Errorf("Authorization = %q; want the key from OPENAI_API_KEY", got)
			}
			var names []string
			for _, tl := range req.Chat.Tools {
				names = append(names, tl.Function.Name)
				if !strings.Contains(tl.Function.Description, "Input: ") {
					t.Errorf("%s's description does not carry its arguments: %q", tl.Function.Name, tl.Function.Description)
				}
			}
			if got := strings.Join(names, ","); req.Chat.Model != "gpt-4o-mini" || got != "run_python,run_command,read_file,write_file,list_files" {
				t.Errorf("model %q, tools %s", req.Chat.Model, got)
			}
			// A plausible slip: "timeout" for "timeout_seconds".
			return openaitest.Call("run_python", arg1(map[string]any{"code": statsCode, "timeout": 30}))
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := observation(req); !strings.Contains(got, `unknown argument "timeout"`) || !strings.Contains(got, "timeout_seconds") {
				t.Errorf("observation for the bad call = %q; want it to name the bad argument and the right one", got)
			}
			return openaitest.Call("run_python", arg1(map[string]any{"code": statsCode}))
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := observation(req); !strings.Contains(got, statsOut) {
				t.Errorf("run_python observation = %q; want %q", got, statsOut)
			}
			return openaitest.Call("write_file", arg1(map[string]any{"path": "summary.txt", "content": statsOut + "\n"}))
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := observation(req); got != "wrote 26 bytes to summary.txt" {
				t.Errorf("write_file observation = %q", got)
			}
			return openaitest.Call("read_file", arg1(map[string]any{"path": "summary.txt"}))
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := observation(req); !strings.Contains(got, statsOut) {
				t.Errorf("read_file observation = %q; want the summary written before", got)
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
	for _, want := range []string{"isolation: namespace", `<- invalid arguments for run_python: unknown argument "timeout"`, "-> write_file {", "<- wrote 26 bytes", answer + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
