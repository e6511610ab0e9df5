package openaitools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

type point struct {
	X, Y float64
}

type shapeIn struct {
	Kind   string  `json:"kind" jsonschema:"enum=line,enum=poly"`
	Points []point `json:"points"`
	Origin *point  `json:"origin,omitempty"`
	Label  string  `json:"label,omitempty"`
	Style  struct {
		Width *int `json:"width,omitempty"`
	} `json:"style"`
}

func TestToolsAreStrictWhereTheSchemaAllows(t *testing.T) {
	shape := toolkit.New("shape", "Draw a shape.", func(ctx context.Context, in shapeIn) (sumOut, error) { return sumOut{}, nil })
	tk := toolkit.Of(addTool(), tagTool(), shape)
	tools := openaitools.Tools(tk)
	if !tools[2].Function.Strict {
		t.Errorf("nested structs, slices, pointers and enums should be strict")
	}
	if len(tools) != 3 || tools[0].Function.Name != "add" || tools[1].Function.Name != "tag" {
		t.Fatalf("tools = %+v", tools)
	}
	if !tools[0].Function.Strict || tools[1].Function.Strict {
		t.Errorf("strict = %v, %v; want the struct tool strict and the map tool not", tools[0].Function.Strict, tools[1].Function.Strict)
	}
	if tools[0].Function.Description != "Add two integers." {
		t.Errorf("description = %q", tools[0].Function.Description)
	}

	// The server applies the API's strict-mode rules to what the real client sends.
	srv := openaitest.New(t, openaitest.Text("ok"))
	_, err := srv.Client().CreateChatCompletion(context.Background(), goopenai.ChatCompletionRequest{
		Model: "gpt-test", Tools: tools,
		Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "hi"}},
	})
	if err != nil {
		t.Fatalf("the API would refuse the declared tools: %v", err)
	}
	var sent struct {
		Tools []struct {
			Function struct {
				Parameters struct {
					Required []string `json:"required"`
				} `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(srv.Requests()[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sent.Tools[0].Function.Parameters.Required, ","); got != "a,b" {
		t.Errorf("add's schema on the wire requires %q, want a,b", got)
	}
}

// TestStreamedRoundTrip is the whole turn with the real go-openai client: tools declared,
// two parallel calls streamed with interleaved fragments, both executed, results sent back
// and checked by the server, final answer read.
func TestStreamedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	tk := toolkit.Of(addTool(), writeTool(dir))
	srv := openaitest.New(t,
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if n := len(req.Chat.Tools); n != 2 {
				t.Errorf("first request declared %d tools, want 2", n)
			}
			return openaitest.Reply{FragmentSize: 3, ToolCalls: []openaitest.ToolCall{
				{ID: "call_add", Name: "add", Arguments: `{"a": 20, "b": 22}`},
				{ID: "call_note", Name: "write_note", Arguments: `{"path": "answer.txt", "content": "forty-two"}`},
			}}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			res := req.ToolResults()
			if res["call_add"] != "sum: 42" || res["call_note"] != "wrote 9 bytes" {
				t.Errorf("tool results sent back = %q", res)
			}
			asst := req.Chat.Messages[len(req.Chat.Messages)-3]
			if len(asst.ToolCalls) != 2 || asst.ToolCalls[0].Function.Arguments != `{"a": 20, "b": 22}` {
				t.Errorf("assistant message sent back = %+v", asst)
			}
			return openaitest.Text("Done: 42, and noted.")
		}),
	)
	client := srv.Client()
	ctx := context.Background()
	req := goopenai.ChatCompletionRequest{
		Model:         "gpt-test",
		Messages:      []goopenai.ChatCompletionMessage{{Role: "user", Content: "add 20 and 22 and note it"}},
		Tools:         openaitools.Tools(tk),
		StreamOptions: &goopenai.StreamOptions{IncludeUsage: true},
	}
	var answer string
	for turn := 0; turn < 2; turn++ {
		stream, err := client.CreateChatCompletionStream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var acc openaitools.Accumulator
		err = acc.ReadAll(stream)
		stream.Close()
		if err != nil {
			t.Fatal(err)
		}
		if acc.Usage() == nil {
			t.Errorf("turn %d: usage chunk lost", turn)
		}
		msg := acc.Message()
		req.Messages = append(req.Messages, msg)
		if len(msg.ToolCalls) == 0 {
			answer = msg.Content
			break
		}
		results, err := openaitools.Dispatch(ctx, tk, msg.ToolCalls)
		if err != nil {
			t.Fatal(err)
		}
		req.Messages = append(req.Messages, results...)
	}
	if answer != "Done: 42, and noted." {
		t.Errorf("answer = %q", answer)
	}
	if got := readNote(t, dir, "answer.txt"); got != "forty-two" {
		t.Errorf("note = %q", got)
	}
}

func TestDispatchAnswersEveryCallInOrder(t *testing.T) {
	dir := t.TempDir()
	tk := toolkit.Of(addTool(), writeTool(dir))
	calls := []goopenai.ToolCall{
		{ID: "1", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{"a":1,"b":2}`}},
		{ID: "2", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{"a":"one","b":2}`}},
		{ID: "3", Type: "function", Function: goopenai.FunctionCall{Name: "nope", Arguments: `{}`}},
		{ID: "4", Function: goopenai.FunctionCall{Name: "write_note", Arguments: `{"path":"../escape","content":"x"}`}},
		{ID: "5", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{"a":1,"b":2`}},
	}
	msgs, err := openaitools.Dispatch(context.Background(), tk, calls)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ id, contains string }{
		{"1", "sum: 3"},
		{"2", "a"},      // names the bad field
		{"3", "add"},    // lists the tools that exist
		{"4", "escape"}, // the tool's own error, for the model to read
		{"5", "JSON"},   // malformed arguments
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d messages for %d calls", len(msgs), len(want))
	}
	for i, w := range want {
		m := msgs[i]
		if m.Role != "tool" || m.ToolCallID != w.id || !strings.Contains(m.Content, w.contains) {
			t.Errorf("message %d = {%s %s %q}; want a tool message for call %s mentioning %q", i, m.Role, m.ToolCallID, m.Content, w.id, w.contains)
		}
	}
}

func TestDispatchRefusesUnusableCalls(t *testing.T) {
	tk := toolkit.Of(addTool())
	for _, tc := range []struct {
		name  string
		calls []goopenai.ToolCall
		want  string
	}{
		{"call without id", []goopenai.ToolCall{{Function: goopenai.FunctionCall{Name: "add"}}}, "has no id"},
		{"repeated id", []goopenai.ToolCall{{ID: "x", Function: goopenai.FunctionCall{Name: "add"}}, {ID: "x", Function: goopenai.FunctionCall{Name: "add"}}}, "appears twice"},
		{"not a function", []goopenai.ToolCall{{ID: "x", Type: "web_search"}}, "only function calls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, err := openaitools.Dispatch(context.Background(), tk, tc.calls)
			if err == nil || !strings.Contains(err.Error(), tc.want) || msgs != nil {
				t.Errorf("Dispatch = %v, %v; want no messages and an error containing %q", msgs, err, tc.want)
			}
		})
	}
}

func TestDispatchStopsOnInfrastructureFailure(t *testing.T) {
	started := make(chan struct{})
	var cancelled atomic.Bool
	slow := toolkit.New("slow", "Waits.", func(ctx context.Context, in emptyIn) (sumOut, error) {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
		return sumOut{}, ctx.Err()
	}, toolkit.ReadOnly())
	crash := toolkit.New("crash", "Loses the sandbox once slow runs.", func(ctx context.Context, in emptyIn) (sumOut, error) {
		<-started
		return sumOut{}, deadSandbox{}
	}, toolkit.ReadOnly())
	tk := toolkit.Of(slow, crash, addTool())
	msgs, err := openaitools.Dispatch(context.Background(), tk, []goopenai.ToolCall{
		{ID: "a", Function: goopenai.FunctionCall{Name: "slow"}},
		{ID: "b", Function: goopenai.FunctionCall{Name: "crash"}},
	})
	var dead deadSandbox
	if !errors.As(err, &dead) || msgs != nil || !strings.Contains(err.Error(), "tool call b (crash)") {
		t.Fatalf("Dispatch = %v, %v; want the sandbox error naming call b", msgs, err)
	}
	if !cancelled.Load() {
		t.Errorf("the concurrent call was not cancelled")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := openaitools.Dispatch(ctx, tk, []goopenai.ToolCall{{ID: "c", Function: goopenai.FunctionCall{Name: "add"}}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Dispatch with a cancelled context = %v", err)
	}
}

// concurrencyProbe is a tool that records how many of its calls overlap.
type concurrencyProbe struct {
	active, peak atomic.Int32
	order        []string
	mu           sync.Mutex
}

func (p *concurrencyProbe) tool(name string, opts ...toolkit.Option) *toolkit.Tool {
	return toolkit.New(name, "Probe.", func(ctx context.Context, in plotIn) (sumOut, error) {
		n := p.active.Add(1)
		for {
			old := p.peak.Load()
			if n <= old || p.peak.CompareAndSwap(old, n) {
				break
			}
		}
		p.mu.Lock()
		p.order = append(p.order, in.Title)
		p.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		p.active.Add(-1)
		return sumOut{}, nil
	}, opts...)
}

func probeCalls(name string, titles ...string) []goopenai.ToolCall {
	var calls []goopenai.ToolCall
	for _, ti := range titles {
		calls = append(calls, goopenai.ToolCall{ID: ti, Function: goopenai.FunctionCall{Name: name, Arguments: `{"title":"` + ti + `"}`}})
	}
	return calls
}

func TestDispatchConcurrency(t *testing.T) {
	t.Run("read-only calls overlap", func(t *testing.T) {
		var both sync.WaitGroup
		both.Add(2)
		meet := toolkit.New("meet", "Returns once both calls run.", func(ctx context.Context, in emptyIn) (sumOut, error) {
			both.Done()
			done := make(chan struct{})
			go func() { both.Wait(); close(done) }()
			select {
			case <-done:
				return sumOut{Sum: 1}, nil
			case <-time.After(10 * time.Second):
				return sumOut{}, errors.New("the other call never started: calls ran one by one")
			}
		}, toolkit.ReadOnly())
		msgs, err := openaitools.Dispatch(context.Background(), toolkit.Of(meet), []goopenai.ToolCall{
			{ID: "a", Function: goopenai.FunctionCall{Name: "meet"}}, {ID: "b", Function: goopenai.FunctionCall{Name: "meet"}},
		})
		if err != nil || msgs[0].Content != "sum: 1" || msgs[1].Content != "sum: 1" {
			t.Errorf("Dispatch = %+v, %v", msgs, err)
		}
	})
	for _, tc := range []struct {
		name      string
		readOnly  bool
		opts      []openaitools.Option
		wantPeak  int32 // the most calls that may overlap
		wantOrder bool  // calls must run in the model's order
	}{
		{"calls that may write run one at a time, in order", false, nil, 1, true},
		{"MaxParallel bounds read-only calls", true, []openaitools.Option{openaitools.MaxParallel(2)}, 2, false},
		{"MaxParallel(0) runs one at a time", true, []openaitools.Option{openaitools.MaxParallel(0)}, 1, true},
		{"AssumeIndependent lets writers overlap within the bound", false, []openaitools.Option{openaitools.AssumeIndependent(), openaitools.MaxParallel(3)}, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &concurrencyProbe{}
			var opts []toolkit.Option
			if tc.readOnly {
				opts = append(opts, toolkit.ReadOnly())
			}
			titles := []string{"a", "b", "c", "d", "e", "f"}
			msgs, err := openaitools.Dispatch(context.Background(), toolkit.Of(p.tool("probe", opts...)), probeCalls("probe", titles...), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range msgs {
				if m.ToolCallID != titles[i] {
					t.Errorf("message %d answers %s, want %s", i, m.ToolCallID, titles[i])
				}
			}
			if peak := p.peak.Load(); peak > tc.wantPeak {
				t.Errorf("%d calls overlapped, want at most %d", peak, tc.wantPeak)
			}
			if tc.wantOrder && strings.Join(p.order, "") != "abcdef" {
				t.Errorf("calls ran in order %v", p.order)
			}
		})
	}
	t.Run("a writer is a barrier between read-only calls", func(t *testing.T) {
		p := &concurrencyProbe{}
		tk := toolkit.Of(p.tool("look", toolkit.ReadOnly()), p.tool("change"))
		calls := append(append(probeCalls("look", "a", "b"), probeCalls("change", "W")...), probeCalls("look", "c", "d")...)
		if _, err := openaitools.Dispatch(context.Background(), tk, calls); err != nil {
			t.Fatal(err)
		}
		got := strings.Join(p.order, "")
		if got[2] != 'W' || !strings.ContainsAny(got[:2], "a") || !strings.ContainsAny(got[:2], "b") {
			t.Errorf("ran in order %s; want a and b, then W, then c and d", got)
		}
	})
}

func TestImagesReachTheModelInAUserMessage(t *testing.T) {
	tk := toolkit.Of(plotTool(), addTool())
	calls := []goopenai.ToolCall{
		{ID: "p1", Type: "function", Function: goopenai.FunctionCall{Name: "plot", Arguments: `{"title":"sin"}`}},
		{ID: "s1", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{"a":1,"b":1}`}},
	}
	msgs, err := openaitools.Dispatch(context.Background(), tk, calls, openaitools.ImageDetail(goopenai.ImageURLDetailLow))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want 2 tool messages and 1 user message", len(msgs))
	}
	if !strings.Contains(msgs[0].Content, "1 image(s)") || msgs[1].Content != "sum: 2" {
		t.Errorf("tool messages = %q, %q", msgs[0].Content, msgs[1].Content)
	}
	user := msgs[2]
	if user.Role != "user" || len(user.MultiContent) != 2 || !strings.Contains(user.MultiContent[0].Text, "p1 (plot)") {
		t.Fatalf("image message = %+v", user)
	}
	img := user.MultiContent[1].ImageURL
	if img.URL != "data:image/png;base64,iVBORyBzaW4=" || img.Detail != goopenai.ImageURLDetailLow {
		t.Errorf("image part = %+v", img)
	}

	// The conversation with the image message must be one the API accepts.
	srv := openaitest.New(t, openaitest.Text("a sine wave"))
	conv := []goopenai.ChatCompletionMessage{
		{Role: "user", Content: "plot"},
		{Role: "assistant", ToolCalls: calls},
	}
	if _, err := srv.Client().CreateChatCompletion(context.Background(), goopenai.ChatCompletionRequest{
		Model: "gpt-test", Messages: append(conv, msgs...), Tools: openaitools.Tools(tk),
	}); err != nil {
		t.Errorf("the API would refuse the conversation: %v", err)
	}
}

func TestEmptyToolOutputIsStillContent(t *testing.T) {
	quiet := toolkit.New("quiet", "Says nothing.", func(ctx context.Context, in emptyIn) (quietOut, error) { return quietOut{}, nil })
	msgs, err := openaitools.Dispatch(context.Background(), toolkit.Of(quiet), []goopenai.ToolCall{{ID: "q", Function: goopenai.FunctionCall{Name: "quiet"}}})
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].Content != "(no output)" {
		t.Errorf("content = %q; an empty content is dropped by go-openai and refused by the API", msgs[0].Content)
	}
}

type quietOut struct{}

func (quietOut) ToolText() string { return "" }
