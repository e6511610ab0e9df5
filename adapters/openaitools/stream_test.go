package openaitools_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
)

func intp(i int) *int { return &i }

func start(i int, id, name string) goopenai.ToolCall {
	return goopenai.ToolCall{Index: intp(i), ID: id, Type: "function", Function: goopenai.FunctionCall{Name: name}}
}

func frag(i int, args string) goopenai.ToolCall {
	return goopenai.ToolCall{Index: intp(i), Function: goopenai.FunctionCall{Arguments: args}}
}

func chunk(deltas ...goopenai.ToolCall) goopenai.ChatCompletionStreamResponse {
	return goopenai.ChatCompletionStreamResponse{Choices: []goopenai.ChatCompletionStreamChoice{{Delta: goopenai.ChatCompletionStreamChoiceDelta{ToolCalls: deltas}}}}
}

func finish(r goopenai.FinishReason) goopenai.ChatCompletionStreamResponse {
	return goopenai.ChatCompletionStreamResponse{Choices: []goopenai.ChatCompletionStreamChoice{{FinishReason: r}}}
}

func TestAccumulatorRebuildsTheMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunks  []goopenai.ChatCompletionStreamResponse
		want    []goopenai.ToolCall
		text    string
		refusal string
	}{
		{
			name: "interleaved parallel calls",
			chunks: []goopenai.ChatCompletionStreamResponse{
				chunk(start(0, "a", "add")), chunk(start(1, "b", "mul")),
				chunk(frag(0, `{"x":`)), chunk(frag(1, `{"y":`)), chunk(frag(1, `2}`)), chunk(frag(0, `1}`)),
				finish(goopenai.FinishReasonToolCalls),
			},
			want: []goopenai.ToolCall{
				{ID: "a", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{"x":1}`}},
				{ID: "b", Type: "function", Function: goopenai.FunctionCall{Name: "mul", Arguments: `{"y":2}`}},
			},
		},
		{
			name: "several deltas in one chunk, indices out of order",
			chunks: []goopenai.ChatCompletionStreamResponse{
				chunk(start(1, "b", "mul"), start(0, "a", "add"), frag(1, `{}`), frag(0, `{}`)),
				finish(goopenai.FinishReasonToolCalls),
			},
			want: []goopenai.ToolCall{
				{ID: "a", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{}`}},
				{ID: "b", Type: "function", Function: goopenai.FunctionCall{Name: "mul", Arguments: `{}`}},
			},
		},
		{
			name: "servers that omit the index",
			chunks: []goopenai.ChatCompletionStreamResponse{
				chunk(goopenai.ToolCall{ID: "a", Function: goopenai.FunctionCall{Name: "add", Arguments: `{"x"`}}),
				chunk(goopenai.ToolCall{Function: goopenai.FunctionCall{Arguments: `:1}`}}),
				chunk(goopenai.ToolCall{ID: "b", Function: goopenai.FunctionCall{Name: "mul", Arguments: `{}`}}),
				finish(goopenai.FinishReasonToolCalls),
			},
			want: []goopenai.ToolCall{
				{ID: "a", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{"x":1}`}},
				{ID: "b", Type: "function", Function: goopenai.FunctionCall{Name: "mul", Arguments: `{}`}},
			},
		},
		{
			name: "servers that repeat id and name in every delta",
			chunks: []goopenai.ChatCompletionStreamResponse{
				chunk(start(0, "a", "add")),
				chunk(goopenai.ToolCall{Index: intp(0), ID: "a", Function: goopenai.FunctionCall{Name: "add", Arguments: `{}`}}),
				finish(goopenai.FinishReasonToolCalls),
			},
			want: []goopenai.ToolCall{{ID: "a", Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: `{}`}}},
		},
		{
			name: "text then refusal, and a usage-only chunk",
			chunks: []goopenai.ChatCompletionStreamResponse{
				{Choices: []goopenai.ChatCompletionStreamChoice{{Delta: goopenai.ChatCompletionStreamChoiceDelta{Role: "assistant", Content: "Hel"}}}},
				{Choices: []goopenai.ChatCompletionStreamChoice{{Delta: goopenai.ChatCompletionStreamChoiceDelta{Content: "lo. "}}}},
				{Choices: []goopenai.ChatCompletionStreamChoice{{Delta: goopenai.ChatCompletionStreamChoiceDelta{Refusal: "I won't."}}}},
				finish(goopenai.FinishReasonStop),
				{Choices: []goopenai.ChatCompletionStreamChoice{}, Usage: &goopenai.Usage{TotalTokens: 7}},
			},
			text:    "Hello. ",
			refusal: "I won't.",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a openaitools.Accumulator
			for i, c := range tc.chunks {
				if err := a.Add(c); err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
			}
			msg := a.Message()
			if got, want := fmt.Sprintf("%+v", msg.ToolCalls), fmt.Sprintf("%+v", tc.want); got != want {
				t.Errorf("tool calls\n got %s\nwant %s", got, want)
			}
			if msg.Role != "assistant" || msg.Content != tc.text || msg.Refusal != tc.refusal {
				t.Errorf("message = %+v", msg)
			}
			if a.FinishReason() == "" {
				t.Errorf("finish reason lost")
			}
		})
	}
}

func TestAccumulatorRefusesChunksItCannotPlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []goopenai.ChatCompletionStreamResponse
		want   string
	}{
		{"fragment before the call's first delta", []goopenai.ChatCompletionStreamResponse{chunk(start(0, "a", "add")), chunk(frag(1, "{}"))}, "tool call 1 arrived before its first delta"},
		{"fragment without index before any call", []goopenai.ChatCompletionStreamResponse{chunk(goopenai.ToolCall{Function: goopenai.FunctionCall{Arguments: "{}"}})}, "before its first delta"},
		{"id changes mid-call", []goopenai.ChatCompletionStreamResponse{chunk(start(0, "a", "add")), chunk(start(0, "z", "add"))}, `changed id from "a" to "z"`},
		{"second choice", []goopenai.ChatCompletionStreamResponse{{Choices: []goopenai.ChatCompletionStreamChoice{{Index: 1}}}}, "choice 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a openaitools.Accumulator
			var err error
			var before string
			for _, c := range tc.chunks {
				before = fmt.Sprintf("%+v", a.Message())
				if err = a.Add(c); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if after := fmt.Sprintf("%+v", a.Message()); after != before {
				t.Errorf("a refused chunk changed the message:\n%s\n%s", before, after)
			}
		})
	}
}

func TestReadAllReportsBrokenStreams(t *testing.T) {
	long := openaitest.Reply{Text: "a text long enough for several chunks", FragmentSize: 4}
	cut, failed := long, long
	cut.DropAfter, failed.ErrorAfter = 3, 3
	srv := openaitest.New(t, cut, failed, long)
	req := goopenai.ChatCompletionRequest{Model: "m", Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "x"}}}
	for _, want := range []string{"unexpected EOF", "server error in the middle", ""} {
		stream, err := srv.Client().CreateChatCompletionStream(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var a openaitools.Accumulator
		err = a.ReadAll(stream)
		stream.Close()
		switch {
		case want == "" && err != nil:
			t.Errorf("complete stream: %v", err)
		case want == "" && a.Text() != long.Text:
			t.Errorf("text = %q", a.Text())
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("err = %v, want one containing %q", err, want)
		case want != "" && a.Text() != "a text l": // what arrived before the break stays
			t.Errorf("partial text = %q", a.Text())
		}
	}

	// A body that just ends — no finish reason, no [DONE] — must not pass for a whole message.
	quiet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"add","arguments":""}}]}}]}`+"\n\n")
	}))
	defer quiet.Close()
	cfg := goopenai.DefaultConfig("k")
	cfg.BaseURL = quiet.URL + "/v1"
	stream, err := goopenai.NewClientWithConfig(cfg).CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var a openaitools.Accumulator
	if err := a.ReadAll(stream); !errors.Is(err, openaitools.ErrIncompleteStream) {
		t.Errorf("err = %v, want ErrIncompleteStream", err)
	}
}

// FuzzAccumulator feeds arbitrary delta sequences: Add must never panic, and whatever it
// accepted must come out as calls with ids.
func FuzzAccumulator(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 0, 5})
	f.Add([]byte{9, 9, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var a openaitools.Accumulator
		for i, op := range ops {
			d := goopenai.ToolCall{Function: goopenai.FunctionCall{Arguments: string(rune('a' + i%26))}}
			if op&1 == 0 {
				d.Index = intp(int(op>>1) % 4)
			}
			if op&2 != 0 {
				d.ID = fmt.Sprintf("id%d", op>>4)
				d.Function.Name = "f"
			}
			_ = a.Add(chunk(d))
		}
		for _, c := range a.ToolCalls() {
			if c.ID == "" || c.Index != nil {
				t.Fatalf("call %+v without id or with index", c)
			}
		}
	})
}
