package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"testing"
)

// TestMatcherAgreesWithRegexp checks the literal-prefix search path against
// regexp's own FindAllIndex: same matches, same spans, for patterns with and
// without a literal prefix, including ones whose matches overlap or span
// lines.
func TestMatcherAgreesWithRegexp(t *testing.T) {
	texts := []string{
		"func NewReader() {}\nfunc NewBufferedReader(x int)\nfunc newReader()\n",
		"aaaa\naaab\nab ab abab\n",
		"TODO(x): one\n// TODO: two TODO(y)\n",
		"foo;\nbar\nfoo bar foo\n\nfoobar",
		"",
		"no match here",
	}
	patterns := []string{
		`func New[A-Z]\w*Reader`, `func New`, `aa`, `a+b`, `ab|ac`, `TODO\(\w+\)`, `foo[^;]*bar`,
		`foo$`, `foo\b`, `^foo`, `\bbar`, `(ab)+`, `x*`, `a.*`, `foo\nbar`,
	}
	for _, p := range patterns {
		re := regexp.MustCompile("(?m)" + p)
		m, err := newMatcher(p, re, false)
		if err != nil {
			t.Fatalf("newMatcher(%q): %v", p, err)
		}
		for _, s := range texts {
			want := re.FindAllIndex([]byte(s), -1)
			got := m.findAll([]byte(s), -1)
			if len(want) == 0 && len(got) == 0 {
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("pattern %q on %q: matcher found %v, regexp %v", p, s, got, want)
			}
			if m.contains([]byte(s)) != (len(want) > 0) {
				t.Errorf("pattern %q on %q: contains disagrees with regexp", p, s)
			}
		}
	}
}

// TestSearchDoesNotFollowSymlinks checks that the one-call open used by
// search refuses a symbolic link that leads out of the workspace, so a
// search never reads what lies behind it.
func TestSearchDoesNotFollowSymlinks(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("needle outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("needle inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	w, err := openWorkspace(Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for _, rel := range []string{"link.txt", "linkdir/secret"} {
		if fd, err := w.openForSearch(rel); err == nil {
			t.Errorf("openForSearch(%q) followed a symbolic link out of the workspace (fd %d)", rel, fd)
		}
	}
	res, werr := w.search(t.Context(), FSSearchRequest{Pattern: "needle"})
	if werr != nil {
		t.Fatal(werr)
	}
	rep := res.(FSSearchReply)
	if len(rep.Matches) != 1 || rep.Matches[0].Path != "in.txt" {
		t.Errorf("search found %+v, want only in.txt", rep.Matches)
	}
}

// A search started at a symbolic link that stays inside the workspace (a
// linked folder, a linked file) reads what it leads to, as every other
// file request does; the one-call open refuses any link, and its refusal
// must send the open down the slower path that follows it, not drop it.
func TestSearchFollowsLinksInsideTheWorkspace(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "real/x.txt"), []byte("needle\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real/x.txt", filepath.Join(dir, "x-link.txt")); err != nil {
		t.Fatal(err)
	}
	w, err := openWorkspace(Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for _, p := range []string{"real", "link", "x-link.txt", "link/x.txt"} {
		res, werr := w.search(t.Context(), FSSearchRequest{Pattern: "needle", Path: p})
		if werr != nil {
			t.Fatalf("search in %q: %v", p, werr)
		}
		if rep := res.(FSSearchReply); len(rep.Matches) != 1 {
			t.Errorf("search in %q found %+v, want the one match in real/x.txt", p, rep.Matches)
		}
	}
}

// A search that stops at MaxResults while files are left unread says it
// was truncated. The walk stops once enough matches are in, and when the
// first file alone had them the reply used to say "complete", depending on
// how fast the workers were.
func TestSearchStoppedAtMaxResultsIsTruncated(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.txt", "z.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("needle\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Folders to walk between the two files give the workers time to
	// finish a.txt first, as on a fast machine.
	for i := range 300 {
		if err := os.MkdirAll(filepath.Join(dir, "m", strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := openWorkspace(Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for range 20 {
		res, werr := w.search(t.Context(), FSSearchRequest{Pattern: "needle", MaxResults: 1})
		if werr != nil {
			t.Fatal(werr)
		}
		if rep := res.(FSSearchReply); len(rep.Matches) != 1 || rep.Matches[0].Path != "a.txt" || !rep.Truncated {
			t.Fatalf("MaxResults 1 over 2 matching files: %+v, want a.txt's match and Truncated", rep)
		}
	}
}
