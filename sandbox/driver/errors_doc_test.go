package driver_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

var update = flag.Bool("update", false, "rewrite generated files")

const errorDocs = "../../docs/errors.md"

func renderErrorDocs() string {
	var b strings.Builder
	b.WriteString("# Error codes\n\n")
	b.WriteString("<!-- Generated from sandbox/driver/errors.go by `go generate ./sandbox/driver`. Do not edit. -->\n\n")
	b.WriteString("Every failed operation returns a `*sandbox.Error` with one of these codes. Match them with\n")
	b.WriteString("`errors.Is(err, sandbox.ErrTimeout)` or read `sandbox.CodeOf(err)`. Codes never change meaning.\n")
	b.WriteString("The list is owned by `sandbox/driver` (`driver.Codes`): backends return these codes in a\n")
	b.WriteString("`*driver.Error`, the in-sandbox agent sends them, and `sandbox` re-exports each as `sandbox.CodeX`.\n\n")
	b.WriteString("| code | meaning | what to do |\n|---|---|---|\n")
	for _, c := range driver.Codes() {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", c.Code, c.Meaning, c.Action)
	}
	return b.String()
}

// TestErrorDocs fails when docs/errors.md and the list of codes differ.
func TestErrorDocs(t *testing.T) {
	want := renderErrorDocs()
	if *update {
		if err := os.WriteFile(errorDocs, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(errorDocs)
	if err != nil {
		t.Fatalf("docs/errors.md is missing: run `go generate ./sandbox/driver`: %v", err)
	}
	if string(got) != want {
		t.Fatalf("docs/errors.md is stale: run `go generate ./sandbox/driver`")
	}
}

// TestCodesAreDocumented checks each code once, with the prefix, a meaning
// and an action, and that Known tells listed codes from others.
func TestCodesAreDocumented(t *testing.T) {
	seen := map[driver.Code]bool{}
	for _, c := range driver.Codes() {
		if seen[c.Code] {
			t.Errorf("code %s listed twice", c.Code)
		}
		seen[c.Code] = true
		if !strings.HasPrefix(string(c.Code), "SBX_") || c.Meaning == "" || c.Action == "" {
			t.Errorf("code %s is not documented properly", c.Code)
		}
		if !c.Code.Known() {
			t.Errorf("Known(%s) = false", c.Code)
		}
	}
	// The short form backends used before the list moved here is not a code.
	for _, c := range []driver.Code{"BACKEND", "NOT_FOUND", "", "SBX_"} {
		if c.Known() {
			t.Errorf("Known(%q) = true", c)
		}
	}
	if !seen[driver.CodeUnsupported] || !seen[driver.CodeDead] {
		t.Fatal("core codes missing")
	}
}
