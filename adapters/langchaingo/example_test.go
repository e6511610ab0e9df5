package langchaingo_test

import (
	"context"
	"fmt"

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
