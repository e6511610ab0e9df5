package toolkit_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// ran is what the stand-in run_command of these examples answers.
type ran struct{ Command string }

func (r ran) ToolText() string { return "ran " + r.Command }

// runCommand is a stand-in for the built-in tool of the same name (toolkit.ForSandbox), which
// would need a sandbox: the policy decides by the tool's name and arguments.
func runCommand() *toolkit.Tool {
	return toolkit.New("run_command", "Run a shell command.", func(ctx context.Context, in struct {
		Command string `json:"command"`
	}) (ran, error) {
		return ran{in.Command}, nil
	})
}

// The seed's command denylist as a one-liner. Unlike a first-token check, it sees rm however
// it is reached.
func ExampleDenyCommands() {
	kit := toolkit.Of(runCommand())
	kit.SetPolicy(toolkit.DenyCommands("rm", "sudo", "shutdown"))

	for _, cmd := range []string{"echo rm", `cd build && env FOO=1 /bin/rm -rf .`, "$(printf rm) -rf ."} {
		args, _ := json.Marshal(map[string]string{"command": cmd})
		res, _ := kit.Call(context.Background(), "run_command", args)
		fmt.Printf("%s\n%s\n\n", cmd, res.Text)
	}
	// Output:
	// echo rm
	// ran echo rm
	//
	// cd build && env FOO=1 /bin/rm -rf .
	// run_command was not run: the tool policy refused it.
	// rule deny command "rm" matched /bin/rm -rf . (via env).
	// Do not try to reach the same effect another way (other paths, wrappers, quoting and bash -c are checked the same way): choose another approach, or tell the user what you need and why.
	//
	// $(printf rm) -rf .
	// run_command was not run: the tool policy refused it.
	// not a rule but the policy's default for commands it cannot check decided (deny): $(printf rm) -rf . — the program name $(printf rm) is only known when it runs.
	// Write the command so that every program it runs is named literally (no $(...), variables, globs, eval or source in a program's place, no script piped into a shell), and it will be checked against the rules.
}

// Rules on commands and on tools' paths, with a person deciding the calls a rule asks about.
func ExampleNewPolicy() {
	policy, err := toolkit.NewPolicy([]toolkit.Rule{
		{Decision: toolkit.Deny, Command: "git push", Message: "commit locally; the user pushes"},
		{Decision: toolkit.Ask, Command: "pip install *"},
		{Decision: toolkit.Deny, Tool: "write_file", Paths: []string{".git"}},
		{Decision: toolkit.Ask, Tool: "delete_file", ExceptPaths: []string{"tmp"}},
	}, toolkit.Approver(func(ctx context.Context, req toolkit.ApprovalRequest) (toolkit.Approval, error) {
		fmt.Printf("asked about %s: %v because %v\n", req.Tool, req.Commands, req.Reasons)
		return toolkit.Approval{Allow: true}, nil // a real approver asks a person
	}))
	if err != nil {
		panic(err)
	}
	kit := toolkit.Of(runCommand())
	kit.SetPolicy(policy)
	res, _ := kit.Call(context.Background(), "run_command", json.RawMessage(`{"command":"pip install -q numpy"}`))
	fmt.Println(res.Text)
	// Output:
	// asked about run_command: [pip install -q numpy] because [rule ask command "pip install *" matched pip install -q numpy]
	// ran pip install -q numpy
}
