package fake_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/fake"
)

// FuzzWorkspacePaths writes through arbitrary paths, with links in place
// that lead out, and checks the workspace's promises: a write either fails
// with a code or lands inside the workspace where a read by the same path
// finds it; nothing ever appears outside (there is no outside to find, so
// the check is that every stored path is a clean relative path).
func FuzzWorkspacePaths(f *testing.F) {
	for _, p := range []string{"a.txt", "../x", "/etc/passwd", "/workspace/a/../b", "up/x", "root/tmp/x", "in/../../x", "loop/x", "a/./b//c", "ok", "\x00", "dir/", "."} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		sb, fk := fake.New(t, fake.AllowUnscripted())
		ws := fk.Workspace()
		for _, l := range [][2]string{{"/", "root"}, {"../..", "up"}, {"a.txt", "ok"}, {"loop", "loop"}} {
			if err := ws.Symlink(l[0], l[1]); err != nil {
				t.Fatal(err)
			}
		}
		ctx := context.Background()
		err := sb.Files.Write(ctx, p, []byte("data"), 0)
		if err != nil {
			if sandbox.CodeOf(err) == "" || sandbox.CodeOf(err) == sandbox.CodeInternal {
				t.Fatalf("Write(%q): uncoded error %v", p, err)
			}
		} else if got, rerr := sb.Files.ReadFile(ctx, p); rerr != nil || string(got) != "data" {
			t.Fatalf("Write(%q) succeeded but reading it back gives %q, %v", p, got, rerr)
		}
		for _, q := range ws.Paths() {
			if strings.HasPrefix(q, "/") || slices.Contains(strings.Split(q, "/"), "..") || strings.Contains(q, "//") {
				t.Fatalf("Write(%q) stored %q", p, q)
			}
		}
	})
}
