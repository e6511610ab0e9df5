package toolkit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// FuzzPolicyShellText feeds shell text to the policy's parser path: it must never panic, and
// text the shell parser cannot parse must never be allowed (the default decides, and says
// so), whatever the rules.
func FuzzPolicyShellText(f *testing.F) {
	for _, tt := range commandTable {
		f.Add(tt.command)
	}
	for _, s := range []string{"", "rm 'x", "$(", "bash -c 'rm", "a=$'\\x72m'; $a", "alias x='rm -rf'; x /", "eval \"${x:-$(rm y)}\"", "%%bash\n!rm x"} {
		f.Add(s)
	}
	kit := toolkit.Of(toolkit.New("run_command", "", func(_ context.Context, in struct {
		Command string `json:"command"`
	}) (string, error) {
		return "ran", nil
	}))
	kit.SetPolicy(toolkit.DenyCommands("rm", "git push", "pip install *"))
	parser := syntax.NewParser(syntax.Variant(syntax.LangBash))
	f.Fuzz(func(t *testing.T, text string) {
		args, err := json.Marshal(map[string]string{"command": text})
		if err != nil {
			t.Skip()
		}
		res, err := kit.Call(context.Background(), "run_command", args)
		if err != nil {
			t.Fatalf("Call: %v", err)
		}
		// What the tool gets is the JSON-decoded text (invalid UTF-8 becomes U+FFFD).
		var sent struct{ Command string }
		if err := json.Unmarshal(args, &sent); err != nil {
			t.Fatal(err)
		}
		if _, perr := parser.Parse(strings.NewReader(sent.Command), ""); perr != nil {
			if !res.IsError || !strings.Contains(res.Text, "default") {
				t.Fatalf("unparseable %q (%v) was not refused by the default: %s", sent.Command, perr, res.Text)
			}
		}
	})
}
