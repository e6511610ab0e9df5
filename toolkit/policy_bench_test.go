package toolkit_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// BenchmarkPolicyCall measures what a policy adds to a tool call: the same call through a
// toolkit without a policy (the floor) and with the denylist and a fuller rule set.
// The tool is a stand-in that does nothing, so the difference is the policy's whole cost.
func BenchmarkPolicyCall(b *testing.B) {
	args := json.RawMessage(`{"command":"cd src && grep -rn TODO . | sort | head -20 && git status --short"}`)
	full, err := toolkit.NewPolicy(rules(b, "deny rm -rf", "deny git push", "ask pip install *", "deny sudo", "allow ls"))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		policy *toolkit.Policy
	}{
		{"no policy (floor)", nil},
		{"DenyCommands(rm,sudo,shutdown)", toolkit.DenyCommands("rm", "sudo", "shutdown")},
		{"five rules", full},
	} {
		b.Run(bc.name, func(b *testing.B) {
			kit := toolkit.Of(runCommand())
			kit.SetPolicy(bc.policy)
			ctx := context.Background()
			for b.Loop() {
				if res, err := kit.Call(ctx, "run_command", args); err != nil || res.IsError {
					b.Fatal(err, res.Text)
				}
			}
		})
	}
}

// BenchmarkPolicyRealCommand is the same comparison on the real run_command in a sandbox: the
// share of a call the policy takes where a model feels it.
func BenchmarkPolicyRealCommand(b *testing.B) {
	sb := newSandbox(b)
	args := json.RawMessage(`{"command":"cd . && echo TODO | sort | head -20"}`)
	for _, bc := range []struct {
		name   string
		policy *toolkit.Policy
	}{
		{"no policy (floor)", nil},
		{"DenyCommands(rm,sudo,shutdown)", toolkit.DenyCommands("rm", "sudo", "shutdown")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			kit := toolkit.ForSandbox(sb)
			kit.SetPolicy(bc.policy)
			ctx := context.Background()
			for b.Loop() {
				if res, err := kit.Call(ctx, "run_command", args); err != nil || res.IsError {
					b.Fatal(err, res.Text)
				}
			}
		})
	}
}
