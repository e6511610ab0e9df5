package schemas_test

import (
	"encoding/json"
	"fmt"

	"github.com/sandboxkit/sandboxkit/schemas"
)

type runCommand struct {
	Command string  `json:"command" description:"shell command, run with bash -c"`
	Cwd     *string `json:"cwd" description:"working directory; default the workspace"`
	Timeout int     `json:"timeout_seconds,omitempty" jsonschema:"minimum=1"`
}

func ExampleFor() {
	schema, _ := schemas.For[runCommand]()
	fmt.Println(string(schema))
	// Output:
	// {"type":"object","properties":{"command":{"type":"string","description":"shell command, run with bash -c"},"cwd":{"type":"string","description":"working directory; default the workspace"},"timeout_seconds":{"type":"integer","minimum":1}},"additionalProperties":false,"required":["command"]}
}

func ExampleStrict() {
	schema, _ := schemas.For[runCommand]()
	strict, reasons, _ := schemas.Strict(schema)
	fmt.Println(string(strict))
	fmt.Println("cannot be strict:", reasons)
	// Output:
	// {"type":"object","properties":{"command":{"type":"string","description":"shell command, run with bash -c"},"cwd":{"type":["string","null"],"description":"working directory; default the workspace"},"timeout_seconds":{"type":["integer","null"],"minimum":1}},"additionalProperties":false,"required":["command","cwd","timeout_seconds"]}
	// cannot be strict: []
}

func ExampleDecode() {
	schema, _ := schemas.For[runCommand]()
	v, _ := schemas.NewValidator(schema)

	args, err := schemas.Decode[runCommand](v, json.RawMessage(`{"command":"ls","cwd":null}`))
	fmt.Printf("%q %v %v\n", args.Command, args.Cwd, err)

	_, err = schemas.Decode[runCommand](v, json.RawMessage(`{"comand":"ls","timeout_seconds":"ten"}`))
	fmt.Println(err)
	// Output:
	// "ls" <nil> <nil>
	// unknown argument "comand" (did you mean "command"? allowed: command, cwd, timeout_seconds); missing required argument "command" (string); argument "timeout_seconds": expected integer, got string "ten"
}
