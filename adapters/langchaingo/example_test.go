package langchaingo_test

import (
	"context"
	"fmt"

	"github.com/tmc/langchaingo/llms"

	"github.com/sandboxkit/sandboxkit/adapters/langchaingo"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// What an OpenAI functions agent sees of a tool, and the inputs its Call accepts.
func ExampleTools() {
	tool := langchaingo.Tools(toolkit.Of(addTool()))[0]
	fmt.Println(tool.Description())
	for _, input := range []string{
		`{"a": 1, "b": 2}`,       // the real arguments
		`"{\"a\": 3, \"b\": 4}"`, // the same, wrapped in a string
		`{"a": 1}`,               // a mistake the model can correct
	} {
		out, err := tool.Call(context.Background(), input)
		fmt.Printf("%s -> %s (err: %v)\n", input, out, err)
	}
	// Output:
	// Add two integers.
	//
	// Input: one JSON object; fields marked * are required:
	// - a*: integer — first addend
	// - b*: integer — second addend
	// {"a": 1, "b": 2} -> sum: 3 (err: <nil>)
	// "{\"a\": 3, \"b\": 4}" -> sum: 7 (err: <nil>)
	// {"a": 1} -> invalid arguments for add: missing required argument "b" (integer) (err: <nil>)
}

// Direct function calling: the model's tool calls run, and Dispatch returns the messages to
// append to the conversation, one tool response per call, in call order.
func ExampleDispatch() {
	tk := toolkit.Of(addTool())
	calls := []llms.ToolCall{
		{ID: "call_1", Type: "function", FunctionCall: &llms.FunctionCall{Name: "add", Arguments: `{"a":1,"b":2}`}},
		{ID: "call_2", Type: "function", FunctionCall: &llms.FunctionCall{Name: "add", Arguments: `{"a":1}`}},
	}
	msgs, err := langchaingo.Dispatch(context.Background(), tk, calls)
	if err != nil {
		fmt.Println(err) // the sandbox is gone or ctx is done
		return
	}
	for _, m := range msgs {
		r := m.Parts[0].(llms.ToolCallResponse)
		fmt.Println(m.Role, r.ToolCallID, r.Content)
	}
	// Output:
	// tool call_1 sum: 3
	// tool call_2 invalid arguments for add: missing required argument "b" (integer)
}
