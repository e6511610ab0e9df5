package langchaingo_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms"

	"github.com/sandboxkit/sandboxkit/adapters/langchaingo"
	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// marshal renders v as JSON, the way a model writes arguments.
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

// The task both sandbox tests script: compute with run_python, then save with write_file.
const (
	readingsCode = "import statistics\nreadings = [18.5, 21.0, 19.25, 23.0, 26.25]\nprint(f'mean={statistics.mean(readings):.2f} max={max(readings)}')"
	readingsOut  = "mean=21.60 max=26.25"
	summaryPath  = "report/summary.txt"
)

// TestAgentExecutorInSandbox runs langchaingo's OpenAIFunctionsAgent and Executor over the
// built-in tools of a real sandbox: the model's first call has a bad argument, it reads the
// explanation and corrects itself, computes with run_python, saves with write_file, and
// finishes. The file must then be in the sandbox's workspace.
func TestAgentExecutorInSandbox(t *testing.T) {
	sb := sandboxtest.NewDefault(t)
	tk := toolkit.ForSandbox(sb)
	observation := func(req *openaitest.Request) string {
		m := req.LastMessage()
		if m.Role != "tool" {
			t.Errorf("last message is %s, want the tool result", m.Role)
		}
		return m.Content
	}
	srv := openaitest.New(t,
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			var desc string
			for _, tl := range req.Chat.Tools {
				if tl.Function.Name == "run_python" {
					desc = tl.Function.Description
				}
			}
			if len(req.Chat.Tools) != len(tk.Tools()) || !strings.Contains(desc, "- code*: string") {
				t.Errorf("%d tools declared, run_python described as %q; want every built-in, with its arguments in the description", len(req.Chat.Tools), desc)
			}
			// A plausible slip: "timeout" for "timeout_seconds".
			return openaitest.Call("run_python", arg1(map[string]any{"code": readingsCode, "timeout": 30}))
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := observation(req); !strings.Contains(got, `unknown argument "timeout"`) || !strings.Contains(got, "timeout_seconds") {
				t.Errorf("observation for the bad call = %q; want it to name the bad argument and the right one", got)
			}
			return openaitest.Call("run_python", arg1(map[string]any{"code": readingsCode, "timeout_seconds": 30}))
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := observation(req); !strings.Contains(got, readingsOut) {
				t.Errorf("run_python observation = %q; want %q", got, readingsOut)
			}
			return openaitest.Call("write_file", arg1(map[string]any{"path": summaryPath, "content": readingsOut + "\n"}))
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := observation(req); got != "wrote 21 bytes to "+summaryPath {
				t.Errorf("write_file observation = %q", got)
			}
			return openaitest.Text("Mean 21.60, max 26.25; saved to " + summaryPath + ".")
		}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	executor := agents.NewExecutor(agents.NewOpenAIFunctionsAgent(newLLM(t, srv), langchaingo.Tools(tk)))
	out, err := chains.Run(ctx, executor, "Summarise the readings 18.5, 21, 19.25, 23, 26.25 and save the summary.")
	if err != nil {
		t.Fatal(err)
	}
	if out != "Mean 21.60, max 26.25; saved to "+summaryPath+"." {
		t.Errorf("output = %q", out)
	}
	if got, err := sb.Files.ReadFile(ctx, summaryPath); err != nil || string(got) != readingsOut+"\n" {
		t.Errorf("%s in the sandbox = %q, %v", summaryPath, got, err)
	}
}

// TestDirectToolCallingInSandbox is the same task through llms.WithTools: the real schemas
// reach the model, a call with an argument of the wrong type is answered with an explanation,
// and the corrected calls run in the sandbox.
func TestDirectToolCallingInSandbox(t *testing.T) {
	sb := sandboxtest.NewDefault(t)
	tk := toolkit.ForSandbox(sb)
	result := func(req *openaitest.Request, id string) string {
		got, ok := req.ToolResults()[id]
		if !ok {
			t.Errorf("no tool message answers %s", id)
		}
		return got
	}
	srv := openaitest.New(t,
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			var params struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			}
			for _, tl := range req.Chat.Tools {
				if tl.Function.Name == "run_python" {
					b, _ := json.Marshal(tl.Function.Parameters)
					_ = json.Unmarshal(b, &params)
				}
			}
			// Strict form by default: every field required, the optional ones nullable.
			if _, ok := params.Properties["timeout_seconds"]; !ok || strings.Join(params.Required, ",") != "code,context_id,timeout_seconds" {
				t.Errorf("run_python declared with %+v; want its real schema in strict form", params)
			}
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{
				{ID: "bad", Name: "run_python", Arguments: marshal(map[string]any{"code": readingsCode, "timeout_seconds": "thirty"})},
			}}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := result(req, "bad"); !strings.Contains(got, `argument "timeout_seconds": expected integer`) {
				t.Errorf("result of the bad call = %q; want the argument named with the type expected", got)
			}
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{
				{ID: "py", Name: "run_python", Arguments: marshal(map[string]any{"code": readingsCode, "timeout_seconds": 30})},
			}}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := result(req, "py"); !strings.Contains(got, readingsOut) {
				t.Errorf("run_python result = %q; want %q", got, readingsOut)
			}
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{
				{ID: "save", Name: "write_file", Arguments: marshal(map[string]any{"path": summaryPath, "content": readingsOut + "\n"})},
			}}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := result(req, "save"); got != "wrote 21 bytes to "+summaryPath {
				t.Errorf("write_file result = %q", got)
			}
			return openaitest.Text("Saved.")
		}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	llm := newLLM(t, srv)
	opts := []llms.CallOption{llms.WithTools(langchaingo.Definitions(tk))}
	msgs := []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, "Summarise the readings and save the summary.")}
	var answer string
	for turn := 0; turn < 5 && answer == ""; turn++ {
		resp, err := llm.GenerateContent(ctx, msgs, opts...)
		if err != nil {
			t.Fatal(err)
		}
		choice := resp.Choices[0]
		if len(choice.ToolCalls) == 0 {
			answer = choice.Content
			break
		}
		results, err := langchaingo.Dispatch(ctx, tk, choice.ToolCalls)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, langchaingo.AssistantMessage(choice))
		msgs = append(msgs, results...)
	}
	if answer != "Saved." {
		t.Errorf("answer = %q", answer)
	}
	if got, err := sb.Files.ReadFile(ctx, summaryPath); err != nil || string(got) != readingsOut+"\n" {
		t.Errorf("%s in the sandbox = %q, %v", summaryPath, got, err)
	}
}
