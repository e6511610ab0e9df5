package langchaingo_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms"
	lcopenai "github.com/tmc/langchaingo/llms/openai"
	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/adapters/langchaingo"
	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

func TestMain(m *testing.M) {
	// The local backend's launcher thread lives as long as the process by design.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/sandboxkit/sandboxkit/sandbox/local/isolate.OnLauncherThread.func1.1"))
}

type addIn struct {
	A int `json:"a" description:"first addend"`
	B int `json:"b" description:"second addend"`
}

type sumOut struct{ Sum int }

func (s sumOut) ToolText() string { return fmt.Sprintf("sum: %d", s.Sum) }

func addTool() *toolkit.Tool {
	return toolkit.New("add", "Add two integers.", func(ctx context.Context, in addIn) (sumOut, error) {
		return sumOut{in.A + in.B}, nil
	}, toolkit.ReadOnly())
}

type writeIn struct {
	Path    string `json:"path" description:"file name inside the notes directory"`
	Content string `json:"content" description:"text to write"`
}

type wrote struct{ N int }

func (w wrote) ToolText() string { return fmt.Sprintf("wrote %d bytes", w.N) }

// writeTool writes real files below dir, confined with os.Root.
func writeTool(dir string) *toolkit.Tool {
	return toolkit.New("write_note", "Write a text file.", func(ctx context.Context, in writeIn) (wrote, error) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return wrote{}, err
		}
		defer root.Close()
		return wrote{len(in.Content)}, root.WriteFile(in.Path, []byte(in.Content), 0o644)
	})
}

type shoutIn struct {
	Text   string `json:"text" description:"what to shout"`
	Repeat *int   `json:"repeat,omitempty" description:"how many times" jsonschema:"default=1"`
}

type shoutOut struct{ S string }

func (s shoutOut) ToolText() string { return s.S }

// shoutTool has one required string argument, so a bare input fills it.
func shoutTool() *toolkit.Tool {
	return toolkit.New("shout", "Upper-case a text.", func(ctx context.Context, in shoutIn) (shoutOut, error) {
		n := 1
		if in.Repeat != nil {
			n = *in.Repeat
		}
		return shoutOut{strings.Repeat(strings.ToUpper(in.Text), n)}, nil
	})
}

type deadSandbox struct{}

func (deadSandbox) Error() string { return "sandbox is dead" }
func (deadSandbox) Fatal() bool   { return true }

type none struct{}

func crashTool() *toolkit.Tool {
	return toolkit.New("crash", "Loses the sandbox.", func(ctx context.Context, in none) (sumOut, error) {
		return sumOut{}, deadSandbox{}
	})
}

type img struct{}

func (img) ToolText() string { return "plotted" }
func (img) ToolImages() []toolkit.Image {
	return []toolkit.Image{{MIMEType: "image/png", Data: []byte("\x89PNG")}}
}

func plotTool() *toolkit.Tool {
	return toolkit.New("plot", "Draw.", func(ctx context.Context, in none) (img, error) { return img{}, nil }, toolkit.ReadOnly())
}

type layoutIn struct {
	Mode  string             `json:"mode" jsonschema:"enum=fast,enum=slow" description:"how hard to try"`
	Files []string           `json:"files,omitempty"`
	Box   struct{ W, H int } `json:"box"`
	Tags  map[string]int     `json:"tags,omitempty"`
}

func TestDescriptionCarriesTheArguments(t *testing.T) {
	layout := toolkit.New("layout", "Lay out.", func(ctx context.Context, in layoutIn) (sumOut, error) { return sumOut{}, nil })
	noArgs := toolkit.New("ping", "Ping.", func(ctx context.Context, in none) (sumOut, error) { return sumOut{}, nil })
	for _, tc := range []struct {
		tool *toolkit.Tool
		want string
	}{
		{shoutTool(), "Upper-case a text.\n\nInput: one JSON object; fields marked * are required:\n" +
			"- text*: string — what to shout\n" +
			"- repeat: integer — how many times (default 1)"},
		{layout, "Lay out.\n\nInput: one JSON object; fields marked * are required:\n" +
			`- mode*: "fast"|"slow" — how hard to try` + "\n" +
			"- files: [string]\n" +
			"- box*: {W*: integer, H*: integer}\n" +
			"- tags: {string: integer}"},
		{noArgs, "Ping.\n\nInput: {} (the tool takes no arguments)."},
	} {
		t.Run(tc.tool.Name(), func(t *testing.T) {
			got := langchaingo.Tools(toolkit.Of(tc.tool))[0]
			if got.Name() != tc.tool.Name() {
				t.Errorf("name = %q", got.Name())
			}
			if got.Description() != tc.want {
				t.Errorf("description\n got %q\nwant %q", got.Description(), tc.want)
			}
		})
	}
}

func TestCallAcceptsWhatAgentsSend(t *testing.T) {
	tk := toolkit.Of(addTool(), shoutTool(), crashTool())
	tools := map[string]interface {
		Call(context.Context, string) (string, error)
	}{}
	for _, tl := range langchaingo.Tools(tk) {
		tools[tl.Name()] = tl
	}
	for _, tc := range []struct {
		name, tool, input, want string
	}{
		{"a JSON object", "add", `{"a": 2, "b": 3}`, "sum: 5"},
		{"a JSON object in a JSON string", "add", `"{\"a\": 2, \"b\": 3}"`, "sum: 5"},
		{"the whole __arg1 object", "add", `{"__arg1": "{\"a\": 2, \"b\": 3}"}`, "sum: 5"},
		{"surrounding whitespace", "add", "\n {\"a\": 1, \"b\": 1} \n", "sum: 2"},
		{"a bare value for the one required string", "shout", `hello world`, "HELLO WORLD"},
		{"a JSON string for the one required string", "shout", `"hi"`, "HI"},
		{"text that only looks like JSON", "shout", `{not json`, "{NOT JSON"},
		{"an unterminated quote for a one-string tool", "shout", `"hi`, `"HI`},
		{"a bare value keeps its whitespace", "shout", "  x", "  X"},
		{"too many layers of strings", "add", `"\"\\\"{}\\\"\""`, "too many layers"},
		{"an object for a one-string tool", "shout", `{"text": "a", "repeat": 3}`, "AAA"},
		{"a wrong type is explained", "add", `{"a": "two", "b": 3}`, `argument "a": expected integer`},
		{"a missing field is explained", "add", `{"a": 1}`, `missing required argument "b"`},
		{"input that is not an object is explained", "add", `2 + 3`, `invalid input for add: the input "2 + 3" is not a JSON object. Send one JSON object with the fields a, b.`},
		{"broken JSON is explained", "add", `{"a": 1,`, "not valid JSON"},
		{"empty input means no arguments", "add", ``, `missing required argument "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tools[tc.tool].Call(context.Background(), tc.input)
			if err != nil {
				t.Fatalf("Call returned an error, which would abort the agent: %v", err)
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("observation %q, want it to contain %q", got, tc.want)
			}
		})
	}
	t.Run("a dead sandbox stops the agent", func(t *testing.T) {
		_, err := tools["crash"].Call(context.Background(), "{}")
		if !errors.As(err, new(deadSandbox)) {
			t.Errorf("err = %v, want the sandbox failure", err)
		}
	})
}

func newLLM(t *testing.T, srv *openaitest.Server) *lcopenai.LLM {
	t.Helper()
	llm, err := lcopenai.New(
		lcopenai.WithToken(openaitest.APIKey),
		lcopenai.WithBaseURL(srv.URL),
		lcopenai.WithModel("gpt-test"),
		lcopenai.WithHTTPClient(http.DefaultClient),
	)
	if err != nil {
		t.Fatal(err)
	}
	return llm
}

// TestAgentExecutorRecoversAndFinishes runs langchaingo's own OpenAI functions agent and
// executor against the scripted server: a call with a bad argument, a corrected call, a
// second tool, and the final answer.
func TestAgentExecutorRecoversAndFinishes(t *testing.T) {
	dir := t.TempDir()
	tk := toolkit.Of(addTool(), writeTool(dir))
	lastTool := func(req *openaitest.Request) string {
		m := req.LastMessage()
		if m.Role != "tool" {
			t.Errorf("last message is %s, want the tool result", m.Role)
		}
		return m.Content
	}
	srv := openaitest.New(t,
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if len(req.Chat.Tools) != 2 || !strings.Contains(req.Chat.Tools[0].Function.Description, "- a*: integer — first addend") {
				t.Errorf("tools sent = %+v; want the argument schema in the description", req.Chat.Tools)
			}
			return openaitest.Call("add", `{"__arg1": "{\"a\": \"two\", \"b\": 40}"}`)
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := lastTool(req); !strings.Contains(got, `argument "a": expected integer`) {
				t.Errorf("observation for the bad call = %q", got)
			}
			return openaitest.Call("add", `{"a": 2, "b": 40}`) // models also skip __arg1
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := lastTool(req); got != "sum: 42" {
				t.Errorf("observation = %q", got)
			}
			return openaitest.Call("write_note", `{"__arg1": "{\"path\": \"sum.txt\", \"content\": \"42\"}"}`)
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := lastTool(req); got != "wrote 2 bytes" {
				t.Errorf("observation = %q", got)
			}
			return openaitest.Text("The sum is 42; saved to sum.txt.")
		}),
	)
	executor := agents.NewExecutor(agents.NewOpenAIFunctionsAgent(newLLM(t, srv), langchaingo.Tools(tk)))
	out, err := chains.Run(context.Background(), executor, "Add two and 40, then save the sum in sum.txt.")
	if err != nil {
		t.Fatal(err)
	}
	if out != "The sum is 42; saved to sum.txt." {
		t.Errorf("output = %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sum.txt")); err != nil || string(b) != "42" {
		t.Errorf("sum.txt = %q, %v", b, err)
	}
}

// TestDirectToolCalling is the llms.WithTools round trip: real schemas declared, parallel
// calls executed, results (and an image) sent back in a conversation the API accepts.
func TestDirectToolCalling(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
	}{
		{"whole responses", false},
		// langchaingo's stream reader appends every argument fragment to the latest call, so
		// the server must send parallel calls one after another, as OpenAI does.
		{"streamed responses", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tk := toolkit.Of(addTool(), writeTool(dir), plotTool())
			srv := openaitest.New(t,
				openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
					if req.Chat.Stream != tc.stream {
						t.Errorf("stream = %v, want %v", req.Chat.Stream, tc.stream)
					}
					for _, tl := range req.Chat.Tools {
						if !tl.Function.Strict {
							t.Errorf("tool %s not strict", tl.Function.Name)
						}
					}
					return openaitest.Reply{Sequential: true, FragmentSize: 5, ToolCalls: []openaitest.ToolCall{
						{ID: "c_add", Name: "add", Arguments: `{"a": 1, "b": 2}`},
						{ID: "c_note", Name: "write_note", Arguments: `{"path": "n.txt", "content": "three"}`},
						{ID: "c_plot", Name: "plot", Arguments: `{}`},
					}}
				}),
				openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
					res := req.ToolResults()
					if res["c_add"] != "sum: 3" || res["c_note"] != "wrote 5 bytes" || !strings.HasPrefix(res["c_plot"], "plotted") {
						t.Errorf("tool results = %q", res)
					}
					last := req.LastMessage()
					if last.Role != "user" || len(last.MultiContent) != 2 || last.MultiContent[1].ImageURL.URL != "data:image/png;base64,iVBORw==" {
						t.Errorf("image message = %+v", last)
					}
					return openaitest.Text("3, noted, plotted")
				}),
			)
			llm := newLLM(t, srv)
			ctx := context.Background()
			opts := []llms.CallOption{llms.WithTools(langchaingo.Definitions(tk))}
			if tc.stream {
				opts = append(opts, llms.WithStreamingFunc(func(context.Context, []byte) error { return nil }))
			}
			msgs := []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, "add 1 and 2, note it, plot it")}
			resp, err := llm.GenerateContent(ctx, msgs, opts...)
			if err != nil {
				t.Fatal(err)
			}
			choice := resp.Choices[0]
			if len(choice.ToolCalls) != 3 {
				t.Fatalf("tool calls = %+v", choice.ToolCalls)
			}
			results, err := langchaingo.Dispatch(ctx, tk, choice.ToolCalls)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, langchaingo.AssistantMessage(choice))
			msgs = append(msgs, results...)
			resp, err = llm.GenerateContent(ctx, msgs, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Content; got != "3, noted, plotted" {
				t.Errorf("answer = %q", got)
			}
		})
	}
}

// TestObservationSaysImagesWereLeftOut: an agent's observation is a string, so a tool's images
// cannot reach the model that way; the model must at least learn that they exist.
func TestObservationSaysImagesWereLeftOut(t *testing.T) {
	got, err := langchaingo.Tools(toolkit.Of(plotTool()))[0].Call(context.Background(), "{}")
	if err != nil || got != "plotted\n[1 image(s) produced; they cannot be shown here]" {
		t.Errorf("Call = %q, %v", got, err)
	}
}

func TestDefinitions(t *testing.T) {
	tags := toolkit.New("tags", "Tags.", func(ctx context.Context, in struct {
		M map[string]int `json:"m"`
	}) (sumOut, error) {
		return sumOut{}, nil
	})
	tk := toolkit.Of(shoutTool(), tags)
	for _, tc := range []struct {
		name       string
		opts       []langchaingo.DefinitionOption
		wantStrict []bool
		wantReq    []string // required list of shout's schema
	}{
		{"strict where possible by default", nil, []bool{true, false}, []string{"text", "repeat"}},
		{"plain schemas with NotStrict", []langchaingo.DefinitionOption{langchaingo.NotStrict()}, []bool{false, false}, []string{"text"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defs := langchaingo.Definitions(tk, tc.opts...)
			for i, d := range defs {
				if d.Type != "function" || d.Function.Strict != tc.wantStrict[i] {
					t.Errorf("definition %d = %+v", i, d.Function)
				}
			}
			params, ok := defs[0].Function.Parameters.(map[string]any)
			if !ok {
				t.Fatalf("parameters are %T, want map[string]any", defs[0].Function.Parameters)
			}
			if got := fmt.Sprint(params["required"]); got != fmt.Sprint(tc.wantReq) {
				t.Errorf("required = %s, want %v", got, tc.wantReq)
			}
		})
	}
}

func TestDispatchFailures(t *testing.T) {
	tk := toolkit.Of(addTool(), crashTool())
	msgs, err := langchaingo.Dispatch(context.Background(), tk, []llms.ToolCall{
		{ID: "1", Type: "function", FunctionCall: &llms.FunctionCall{Name: "add", Arguments: `{"a":1}`}},
		{ID: "2", Type: "function", FunctionCall: &llms.FunctionCall{Name: "nope", Arguments: `{}`}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`missing required argument "b"`, "add"} {
		part := msgs[i].Parts[0].(llms.ToolCallResponse)
		if msgs[i].Role != llms.ChatMessageTypeTool || len(msgs[i].Parts) != 1 || !strings.Contains(part.Content, want) {
			t.Errorf("message %d = %+v; want one tool response mentioning %q", i, msgs[i], want)
		}
	}
	if _, err := langchaingo.Dispatch(context.Background(), tk, []llms.ToolCall{{ID: "x", FunctionCall: &llms.FunctionCall{Name: "crash"}}}); !errors.As(err, new(deadSandbox)) {
		t.Errorf("dead sandbox: err = %v", err)
	}
	if _, err := langchaingo.Dispatch(context.Background(), tk, []llms.ToolCall{{ID: "x"}}); err == nil {
		t.Errorf("a call without a function was accepted")
	}
}

// FuzzCallInput feeds arbitrary agent input: Call must answer with an observation, never a Go
// error or a panic, for tools whose functions never fail fatally.
func FuzzCallInput(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":2}`, `"{\"a\":1}"`, `{"__arg1":"\"{}\""}`, `hello`, `"""`, `{"__arg1":1}`} {
		f.Add(s)
	}
	tools := langchaingo.Tools(toolkit.Of(addTool(), shoutTool()))
	f.Fuzz(func(t *testing.T, input string) {
		for _, tl := range tools {
			out, err := tl.Call(context.Background(), input)
			if err != nil || out == "" {
				t.Fatalf("%s.Call(%q) = %q, %v", tl.Name(), input, out, err)
			}
		}
	})
}

// TestToolsPassTheToolkitsPolicy: the wrapped tools run through the toolkit, so its policy
// decides their calls too (they called the tool directly before, past any policy).
func TestToolsPassTheToolkitsPolicy(t *testing.T) {
	ran := false
	kit := toolkit.Of(toolkit.New("run_command", "Run a command.", func(ctx context.Context, in struct {
		Command string `json:"command"`
	}) (string, error) {
		ran = true
		return "ran", nil
	}))
	kit.SetPolicy(toolkit.DenyCommands("rm"))
	out, err := langchaingo.Tools(kit)[0].Call(context.Background(), `{"command":"env rm -rf x"}`)
	if err != nil {
		t.Fatal(err)
	}
	if ran || !strings.Contains(out, `deny command "rm"`) {
		t.Errorf("ran %v, observation %q; want a refusal naming the rule", ran, out)
	}
}
