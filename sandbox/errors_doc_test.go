package sandbox_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

var update = flag.Bool("update", false, "rewrite generated files")

func renderErrorDocs() string {
	var b strings.Builder
	b.WriteString("# Error codes\n\n")
	b.WriteString("<!-- Generated from sandbox/errors.go by `go generate ./sandbox`. Do not edit. -->\n\n")
	b.WriteString("Every failed operation returns a `*sandbox.Error` with one of these codes. Match them with\n")
	b.WriteString("`errors.Is(err, sandbox.ErrTimeout)` or read `sandbox.CodeOf(err)`. Codes never change meaning.\n\n")
	b.WriteString("| code | meaning | what to do |\n|---|---|---|\n")
	for _, c := range sandbox.ErrorCodes() {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", c.Code, c.Meaning, c.Action)
	}
	return b.String()
}

func TestErrorDocs(t *testing.T) {
	const path = "../docs/errors.md"
	want := renderErrorDocs()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("docs/errors.md is missing: run `go generate ./sandbox`: %v", err)
	}
	if string(got) != want {
		t.Fatalf("docs/errors.md is stale: run `go generate ./sandbox`")
	}
}

func TestErrorCodesMatchSentinels(t *testing.T) {
	seen := map[sandbox.Code]bool{}
	for _, c := range sandbox.ErrorCodes() {
		if seen[c.Code] {
			t.Errorf("code %s listed twice", c.Code)
		}
		seen[c.Code] = true
		if !strings.HasPrefix(string(c.Code), "SBX_") || c.Meaning == "" || c.Action == "" {
			t.Errorf("code %s is not documented properly", c.Code)
		}
		err := fmt.Errorf("wrapped: %w", &sandbox.Error{Code: c.Code, Op: "X", Message: "m"})
		if sandbox.CodeOf(err) != c.Code {
			t.Errorf("CodeOf lost %s", c.Code)
		}
	}
	if !seen[sandbox.CodeTimeout] || !seen[sandbox.CodeDead] {
		t.Fatal("core codes missing")
	}
}
