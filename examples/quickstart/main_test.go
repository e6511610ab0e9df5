package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeQuickstart keeps the README's quickstart honest: the code block
// there must be this program, and the program must print what the README
// says it prints.
func TestReadmeQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- file: examples/quickstart/main.go -->\\s*```go\\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no quickstart block (marked <!-- file: examples/quickstart/main.go -->)")
	}
	if strings.TrimSpace(string(block[1])) != strings.TrimSpace(string(src)) {
		t.Fatal("README.md's quickstart differs from examples/quickstart/main.go: copy the file into the README")
	}
	out, err := exec.Command("go", "run", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	for _, want := range []string{"hello from Linux", "python says 90", "kept in the workspace", "isolation: "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
