package openai_test

import (
	"context"
	"fmt"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openai"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// Two parallel calls, streamed the way the API streams them, rebuilt and dispatched.
func ExampleAccumulator() {
	i0, i1 := 0, 1
	chunks := []goopenai.ChatCompletionStreamResponse{}
	for _, d := range []goopenai.ToolCall{
		{Index: &i0, ID: "call_a", Type: "function", Function: goopenai.FunctionCall{Name: "add"}},
		{Index: &i1, ID: "call_b", Type: "function", Function: goopenai.FunctionCall{Name: "add"}},
		{Index: &i0, Function: goopenai.FunctionCall{Arguments: `{"a":1,`}},
		{Index: &i1, Function: goopenai.FunctionCall{Arguments: `{"a":10,`}},
		{Index: &i1, Function: goopenai.FunctionCall{Arguments: `"b":20}`}},
		{Index: &i0, Function: goopenai.FunctionCall{Arguments: `"b":2}`}},
	} {
		chunks = append(chunks, goopenai.ChatCompletionStreamResponse{Choices: []goopenai.ChatCompletionStreamChoice{
			{Delta: goopenai.ChatCompletionStreamChoiceDelta{ToolCalls: []goopenai.ToolCall{d}}},
		}})
	}

	var acc openai.Accumulator
	for _, c := range chunks {
		if err := acc.Add(c); err != nil {
			fmt.Println(err)
			return
		}
	}
	msg := acc.Message()
	for _, c := range msg.ToolCalls {
		fmt.Println(c.ID, c.Function.Name, c.Function.Arguments)
	}

	tk := toolkit.Of(addTool())
	results, err := openai.Dispatch(context.Background(), tk, msg.ToolCalls)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range results {
		fmt.Println(r.Role, r.ToolCallID, r.Content)
	}
	// Output:
	// call_a add {"a":1,"b":2}
	// call_b add {"a":10,"b":20}
	// tool call_a sum: 3
	// tool call_b sum: 30
}
