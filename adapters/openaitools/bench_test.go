package openaitools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// BenchmarkDispatch measures what Dispatch adds to a tool call; the floor is the same call
// made directly through the toolkit.
func BenchmarkDispatch(b *testing.B) {
	tk := toolkit.Of(addTool())
	ctx := context.Background()
	args := `{"a":1,"b":2}`
	b.Run("floor=toolkit.Call", func(b *testing.B) {
		for b.Loop() {
			if _, err := tk.Call(ctx, "add", json.RawMessage(args)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 8} {
		calls := make([]goopenai.ToolCall, n)
		for i := range calls {
			calls[i] = goopenai.ToolCall{ID: fmt.Sprint(i), Type: "function", Function: goopenai.FunctionCall{Name: "add", Arguments: args}}
		}
		b.Run(fmt.Sprintf("Dispatch/%d-calls", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := openaitools.Dispatch(ctx, tk, calls); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAccumulator measures joining a streamed pair of parallel calls (2 KiB of
// arguments in 8-byte fragments); the floor only concatenates the same fragments.
func BenchmarkAccumulator(b *testing.B) {
	args := `{"code":"` + strings.Repeat("x", 1000) + `"}`
	var chunks []goopenai.ChatCompletionStreamResponse
	chunks = append(chunks, chunk(start(0, "a", "run")), chunk(start(1, "b", "run")))
	for i := 0; i < len(args); i += 8 {
		end := min(i+8, len(args))
		chunks = append(chunks, chunk(frag(0, args[i:end])), chunk(frag(1, args[i:end])))
	}
	b.Run("floor=concatenate", func(b *testing.B) {
		for b.Loop() {
			var s [2]strings.Builder
			for _, c := range chunks {
				d := c.Choices[0].Delta.ToolCalls[0]
				s[*d.Index].WriteString(d.Function.Arguments)
			}
		}
	})
	b.Run("Accumulator", func(b *testing.B) {
		for b.Loop() {
			var a openaitools.Accumulator
			for _, c := range chunks {
				if err := a.Add(c); err != nil {
					b.Fatal(err)
				}
			}
			_ = a.ToolCalls()
		}
	})
}
