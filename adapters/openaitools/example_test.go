package openaitools_test

import (
	"context"
	"fmt"

	"github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// Two parallel calls, streamed the way the API streams them, rebuilt and dispatched.
func ExampleAccumulator() {
	i0, i1 := 0, 1
	chunks := []openai.ChatCompletionStreamResponse{}
	for _, d := range []openai.ToolCall{
		{Index: &i0, ID: "call_a", Type: "function", Function: openai.FunctionCall{Name: "add"}},
		{Index: &i1, ID: "call_b", Type: "function", Function: openai.FunctionCall{Name: "add"}},
		{Index: &i0, Function: openai.FunctionCall{Arguments: `{"a":1,`}},
		{Index: &i1, Function: openai.FunctionCall{Arguments: `{"a":10,`}},
		{Index: &i1, Function: openai.FunctionCall{Arguments: `"b":20}`}},
		{Index: &i0, Function: openai.FunctionCall{Arguments: `"b":2}`}},
	} {
		chunks = append(chunks, openai.ChatCompletionStreamResponse{Choices: []openai.ChatCompletionStreamChoice{
			{Delta: openai.ChatCompletionStreamChoiceDelta{ToolCalls: []openai.ToolCall{d}}},
		}})
	}

	var acc openaitools.Accumulator
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
	results, err := openaitools.Dispatch(context.Background(), tk, msg.ToolCalls)
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
