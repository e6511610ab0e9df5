package toolkit_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// TestReadmePolicyFile keeps the README's policy file honest: it parses, and decides as the
// README says.
func TestReadmePolicyFile(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- policy-file -->\n```yaml\n")
	if !ok {
		t.Fatal("README.md has no policy file block (marked <!-- policy-file -->)")
	}
	block, _, _ := strings.Cut(after, "```")
	var asked []toolkit.ApprovalRequest
	p, err := toolkit.ParsePolicy([]byte(block), toolkit.Approver(func(_ context.Context, req toolkit.ApprovalRequest) (toolkit.Approval, error) {
		asked = append(asked, req)
		return toolkit.Approval{}, nil
	}))
	if err != nil {
		t.Fatalf("the README's policy file: %v", err)
	}
	for _, tt := range []struct{ tool, args, want, text string }{
		{"run_command", `{"command":"rm -r -f build"}`, "deny", "delete single files with delete_file"},
		{"run_command", `{"command":"rm build/a.o"}`, "allow", ""},
		{"run_command", `{"command":"git push origin main"}`, "deny", "the user pushes"},
		{"run_command", `{"command":"pip install numpy"}`, "ask", ""},
		{"run_command", `{"command":"eval \"$cmd\""}`, "deny", "not a rule"},
		{"write_file", `{"path":".git/config","content":""}`, "deny", ".git"},
		{"delete_file", `{"path":"src/main.go"}`, "ask", ""},
		{"delete_file", `{"path":"tmp/x"}`, "allow", ""},
	} {
		got, text := outcome(t, p, &asked, tt.tool, tt.args)
		if got != tt.want || !strings.Contains(text, tt.text) {
			t.Errorf("%s %s: %s (%q); want %s with %q", tt.tool, tt.args, got, text, tt.want, tt.text)
		}
	}
}
