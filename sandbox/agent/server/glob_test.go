package server

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern, rel string
		want         bool
	}{
		{"*.py", "main.py", true},
		{"*.py", "src/deep/main.py", true}, // no "/": the base name, like find -name
		{"*.py", "main.go", false},
		{"src/*.go", "src/a.go", true},
		{"src/*.go", "src/x/a.go", false},
		{"src/**/*.go", "src/a.go", true}, // "**" matches zero directories
		{"src/**/*.go", "src/x/y/a.go", true},
		{"src/**/*.go", "lib/x/a.go", false},
		{"**/test/*", "a/b/test/c", true},
		{"**", "a/b/c", true},
		{"a/**", "a", true},
		{"a/**/b/**/c", "a/x/b/y/z/c", true},
		{"a/**/b/**/c", "a/x/c", false},
		{"[", "x", false},         // malformed: matches nothing
		{"a/[/b", "a/[/b", false}, // malformed segment
	}
	for _, c := range cases {
		if got := globMatch(c.pattern, c.rel); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.rel, got, c.want)
		}
	}
}

// A pattern from the model with many "**" against a deep path must not take
// exponential time: the naive recursion never finishes this case.
func TestGlobMatchManyDoubleStarsOnADeepPath(t *testing.T) {
	pattern := strings.Repeat("**/", 30) + "nomatch"
	rel := strings.Repeat("d/", 200) + "file"
	if globMatch(pattern, rel) {
		t.Fatalf("globMatch matched a path without the last segment")
	}
	if !globMatch(strings.Repeat("**/", 30)+"file", rel) {
		t.Fatalf("globMatch missed the base name below 200 directories")
	}
}
