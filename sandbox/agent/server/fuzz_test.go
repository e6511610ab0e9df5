//go:build unix

package server

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// FuzzWorkspacePaths writes through arbitrary request paths into a
// workspace that holds links leading out of it (to its parent, to /, a
// loop) and checks the confinement every backend and the fake sandbox
// rely on: a write either fails with a coded error, or lands in a file
// inside the workspace (not behind a link), where a read by the same path
// finds it; nothing outside the workspace changes. "$WS" in an input stands for the workspace's own
// absolute path.
func FuzzWorkspacePaths(f *testing.F) {
	for _, p := range []string{"a.txt", "../x", "/etc/passwd", "$WS/a/../b", "$WS/../x", "$WS", "up/x", "parent/x", "abs/x",
		"root/tmp/x", "in/../../x", "loop/x", "a/./b//c", "ok", "\x00", "dir/", ".", "", "ok/x", "..", "\xff"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "ws")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(parent, "outside.txt"), []byte("outside"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, l := range [][2]string{{"/", "root"}, {"../..", "up"}, {"..", "parent"}, {parent, "abs"}, {"a.txt", "ok"}, {"loop", "loop"}} {
			if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
				t.Fatal(err)
			}
		}
		before := tree(t, parent, dir)
		w, err := openWorkspace(wire.Hello{Workspace: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer w.close()
		p = strings.ReplaceAll(p, "$WS", dir)
		_, werr := w.write(wire.FSWriteRequest{Path: p, Data: []byte("data")})
		if werr != nil {
			if werr.Code == "" || werr.Code == wire.CodeInternal {
				t.Fatalf("write %q: uncoded error %v", p, werr)
			}
		} else {
			rep, rerr := w.read(wire.FSReadRequest{Path: p})
			if rerr != nil || string(rep.(wire.FSReadReply).Data) != "data" {
				t.Fatalf("write %q succeeded but reading it back gives %v, %v", p, rep, rerr)
			}
			// The file is inside the workspace itself, not reached
			// through a link (WalkDir does not follow them).
			found := 0
			_ = filepath.WalkDir(dir, func(q string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if b, _ := os.ReadFile(q); string(b) == "data" {
						found++
					}
				}
				return nil
			})
			if found != 1 {
				t.Fatalf("write %q succeeded, and %d files inside the workspace hold what it wrote, want 1", p, found)
			}
		}
		if after := tree(t, parent, dir); !slices.Equal(before, after) {
			t.Fatalf("write %q changed what is outside the workspace:\nbefore %q\nafter  %q", p, before, after)
		}
	})
}

// tree lists every path below parent outside the workspace dir, with the
// contents of its files.
func tree(t *testing.T, parent, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return fs.SkipDir
		}
		entry := p
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			entry += "=" + string(b)
		}
		out = append(out, entry)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
