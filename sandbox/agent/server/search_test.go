package server

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/grep"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

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
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for _, rel := range []string{"link.txt", "linkdir/secret"} {
		if f, err := (searchFS{w}).Open(rel); err == nil {
			f.Close()
			t.Errorf("the search's open of %q followed a symbolic link out of the workspace", rel)
		}
	}
	res, werr := w.search(t.Context(), wire.FSSearchRequest{Pattern: "needle"})
	if werr != nil {
		t.Fatal(werr)
	}
	rep := res.(wire.FSSearchReply)
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
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for _, p := range []string{"real", "link", "x-link.txt", "link/x.txt"} {
		res, werr := w.search(t.Context(), wire.FSSearchRequest{Pattern: "needle", Path: p})
		if werr != nil {
			t.Fatalf("search in %q: %v", p, werr)
		}
		if rep := res.(wire.FSSearchReply); len(rep.Matches) != 1 {
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
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for range 20 {
		res, werr := w.search(t.Context(), wire.FSSearchRequest{Pattern: "needle", MaxResults: 1})
		if werr != nil {
			t.Fatal(werr)
		}
		if rep := res.(wire.FSSearchReply); len(rep.Matches) != 1 || rep.Matches[0].Path != "a.txt" || !rep.Truncated {
			t.Fatalf("MaxResults 1 over 2 matching files: %+v, want a.txt's match and Truncated", rep)
		}
	}
}

// BenchmarkWorkspaceSearchGoSrc is the agent's search alone (no sandbox,
// no protocol) over the Go source tree, for three kinds of pattern: one
// with a literal prefix, one without, one case-folded.
//
//	go test -run '^$' -bench WorkspaceSearch ./sandbox/agent
func BenchmarkWorkspaceSearchGoSrc(b *testing.B) {
	const root = "/usr/local/go/src"
	if _, err := os.Stat(root); err != nil {
		b.Skip("no Go source tree at", root)
	}
	w, err := openWorkspace(wire.Hello{Workspace: root})
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	for _, c := range []struct {
		name, pattern string
		fold          bool
	}{{"literal-prefix", `func New[A-Z]\w*Reader`, false}, {"no-literal", `\w+Reader\(`, false}, {"ignore-case", `newreader`, true}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				res, werr := w.search(context.Background(), wire.FSSearchRequest{Pattern: c.pattern, IgnoreCase: c.fold, MaxResults: 100000})
				if werr != nil {
					b.Fatal(werr)
				}
				if len(res.(wire.FSSearchReply).Matches) == 0 {
					b.Fatal("no match")
				}
			}
		})
	}
}

// The workspace as the engine reads it (one-call opens beneath the root,
// directories read with getdents, a short read taken as the end of a
// file) finds exactly what the engine finds through os.DirFS over the same
// tree; unicode has a file four times the engine's first read buffer.
func TestSearchFSAgreesWithDirFS(t *testing.T) {
	for _, root := range []string{"/usr/local/go/src/regexp", "/usr/local/go/src/unicode"} {
		if _, err := os.Stat(root); err != nil {
			t.Skip("no Go source tree at", root)
		}
		t.Run(filepath.Base(root), func(t *testing.T) { testSearchFSAgreesWithDirFS(t, root) })
	}
}

func testSearchFSAgreesWithDirFS(t *testing.T, root string) {
	w, err := openWorkspace(wire.Hello{Workspace: root})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for _, p := range []string{`func \w+\(`, `(?i)match`, `^$`, `[A-Z]{3}`} {
		m, werr := compilePattern(p, false)
		if werr != nil {
			t.Fatal(werr)
		}
		want, err := grep.Search(t.Context(), os.DirFS(root).(fs.ReadDirFS), ".", m, grep.Options{MaxFileSize: maxSearchFile, MaxLineBytes: maxMatchLine})
		if err != nil {
			t.Fatal(err)
		}
		res, werr := w.search(t.Context(), wire.FSSearchRequest{Pattern: p, MaxResults: 1 << 30})
		if werr != nil {
			t.Fatal(werr)
		}
		got := res.(wire.FSSearchReply)
		if got.Files != want.Files || len(got.Matches) != len(want.Matches) || len(want.Matches) == 0 {
			t.Fatalf("%q: the workspace gave %d matches in %d files, os.DirFS %d in %d", p, len(got.Matches), got.Files, len(want.Matches), want.Files)
		}
		for i, mt := range want.Matches {
			if g := got.Matches[i]; g.Path != mt.Path || g.Line != mt.Line || g.Text != mt.Text {
				t.Fatalf("%q: match %d is %+v, want %+v", p, i, g, mt)
			}
		}
	}
}
