package fake_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/fake"
)

func entryFacts(e sandbox.Entry) string {
	return fmt.Sprintf("%s:%s:%d:%o:%s", e.Path, e.Type, e.Size, e.Mode.Perm(), e.Target)
}

func fop(f func(ctx context.Context, fs *sandbox.Files) (string, error)) func(context.Context, *sandbox.Sandbox) (string, error) {
	return func(ctx context.Context, sb *sandbox.Sandbox) (string, error) { return f(ctx, sb.Files) }
}

func wr(p, data string, mode fs.FileMode) func(context.Context, *sandbox.Sandbox) (string, error) {
	return fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
		return "", f.Write(ctx, p, []byte(data), mode)
	})
}

func rd(p string, o sandbox.ReadOptions) func(context.Context, *sandbox.Sandbox) (string, error) {
	return fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
		c, err := f.Read(ctx, p, o)
		if c == nil {
			return "", err
		}
		return fmt.Sprintf("%q size=%d bin=%v lines=%d more=%v trunc=%v", c.Data, c.Size, c.Binary, c.Lines, c.More, c.Truncated), err
	})
}

func st(p string) func(context.Context, *sandbox.Sandbox) (string, error) {
	return fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
		e, err := f.Stat(ctx, p)
		return entryFacts(e), err
	})
}

func ls(p string, o sandbox.ListOptions) func(context.Context, *sandbox.Sandbox) (string, error) {
	return fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
		l, err := f.List(ctx, p, o)
		if l == nil {
			return "", err
		}
		var out []string
		for _, e := range l.Entries {
			out = append(out, entryFacts(e))
		}
		return fmt.Sprintf("%v trunc=%v", out, l.Truncated), err
	})
}

// TestFileOperationsMatchTheLocalBackend runs the same file operations,
// edge cases first, on the local backend and the fake and compares
// results and error codes.
func TestFileOperationsMatchTheLocalBackend(t *testing.T) {
	real := newLocal(t)
	sb, fk := fake.New(t)
	fk.Script.CommandFunc(fake.Regexp(`^ln -s \S+ \S+$`), func(_ context.Context, e fake.Exec) fake.Reply {
		if err := e.Workspace.Symlink(e.Args[2], e.Args[3]); err != nil {
			return fake.Reply{Stderr: err.Error(), ExitCode: 1}
		}
		return fake.Reply{}
	})
	ln := func(target, name string) func(context.Context, *sandbox.Sandbox) (string, error) {
		return func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			r, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"ln", "-s", target, name}})
			return cmdFacts(r), err
		}
	}
	tarOf := func(files map[string]string) *bytes.Buffer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, name := range []string{"a/", "a/one.txt", "../evil", "/abs"} {
			body, ok := files[name]
			if !ok {
				continue
			}
			h := &tar.Header{Name: name, Mode: 0o640, Typeflag: tar.TypeReg, Size: int64(len(body))}
			if strings.HasSuffix(name, "/") {
				h = &tar.Header{Name: name, Mode: 0o755, Typeflag: tar.TypeDir}
			}
			tw.WriteHeader(h)
			tw.Write([]byte(body))
		}
		tw.Close()
		return &buf
	}
	compare(t, real, sb, []step{
		{"write the workspace itself", wr("", "x", 0)},
		{"write dot", wr(".", "x", 0)},
		{"write a file", wr("d/f.txt", "one\ntwo\n", 0o640)},
		{"write under a file", wr("d/f.txt/x", "x", 0)},
		{"write with a trailing slash", wr("d/new/", "x", 0)},
		{"stat a file", st("d/f.txt")},
		{"stat a dir", st("d")},
		{"stat the workspace", st("")},
		{"stat missing", st("d/nope")},
		{"stat under a file", st("d/f.txt/x")},
		{"read a dir", rd("d", sandbox.ReadOptions{})},
		{"read lines", rd("d/f.txt", sandbox.ReadOptions{Offset: 1, Limit: 5})},
		{"read an empty file", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			if err := sb.Files.Write(ctx, "empty", nil, 0); err != nil {
				return "", err
			}
			return rd("empty", sandbox.ReadOptions{})(ctx, sb)
		}},
		{"mkdir over a file", fop(func(ctx context.Context, f *sandbox.Files) (string, error) { return "", f.Mkdir(ctx, "d/f.txt") })},
		{"mkdir the workspace", fop(func(ctx context.Context, f *sandbox.Files) (string, error) { return "", f.Mkdir(ctx, "") })},
		{"edit a dir", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			n, err := f.Edit(ctx, "d", "a", "b", sandbox.EditOptions{})
			return fmt.Sprint(n), err
		})},
		{"edit missing", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			n, err := f.Edit(ctx, "nope", "a", "b", sandbox.EditOptions{})
			return fmt.Sprint(n), err
		})},
		{"list a file", ls("d/f.txt", sandbox.ListOptions{})},
		{"list under a file", ls("d/f.txt/x", sandbox.ListOptions{})},
		{"link to a file", ln("d/f.txt", "lf")},
		{"link to a dir", ln("d", "ld")},
		{"dangling link", ln("d/later.txt", "dangling")},
		{"stat a link", st("lf")},
		{"list through a link to a dir", ls("ld", sandbox.ListOptions{})},
		{"list the workspace with links", ls("", sandbox.ListOptions{Depth: 2})},
		{"read through a link", rd("lf", sandbox.ReadOptions{})},
		{"a chain of links", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			prev := "lf"
			for i := 2; i <= 9; i++ {
				name := fmt.Sprintf("chain%d", i)
				if out, err := ln(prev, name)(ctx, sb); err != nil || !strings.Contains(out, "exit=0") {
					return out, err
				}
				prev = name
			}
			return "", nil
		}},
		{"read through 8 links", rd("chain8", sandbox.ReadOptions{})},
		{"read through 9 links (os.Root gives up)", rd("chain9", sandbox.ReadOptions{})},
		{"write through a dangling link", wr("dangling", "made through the link", 0)},
		{"the link's target now exists", rd("d/later.txt", sandbox.ReadOptions{})},
		{"write through a link keeps the link", st("dangling")},
		{"chmod through a link", fop(func(ctx context.Context, f *sandbox.Files) (string, error) { return "", f.Chmod(ctx, "lf", 0o600) })},
		{"the target's mode changed", st("d/f.txt")},
		{"chmod missing", fop(func(ctx context.Context, f *sandbox.Files) (string, error) { return "", f.Chmod(ctx, "nope", 0o600) })},
		{"copy a link copies its target", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			if err := f.Copy(ctx, "lf", "copied.txt", sandbox.CopyOptions{}); err != nil {
				return "", err
			}
			e, err := f.Stat(ctx, "copied.txt")
			return entryFacts(e), err
		})},
		{"copy missing", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.Copy(ctx, "nope", "x", sandbox.CopyOptions{})
		})},
		{"move a link moves the link", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			if err := f.Move(ctx, "lf", "lf2", sandbox.MoveOptions{}); err != nil {
				return "", err
			}
			e, err := f.Stat(ctx, "lf2")
			return entryFacts(e), err
		})},
		{"move the workspace", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.Move(ctx, "", "x", sandbox.MoveOptions{})
		})},
		{"move a file onto a dir with overwrite", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			if err := f.Mkdir(ctx, "target/inner"); err != nil {
				return "", err
			}
			if err := f.Move(ctx, "copied.txt", "target", sandbox.MoveOptions{Overwrite: true}); err != nil {
				return "", err
			}
			e, err := f.Stat(ctx, "target")
			return entryFacts(e), err
		})},
		{"remove a link removes the link only", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			if err := f.Remove(ctx, "ld", sandbox.RemoveOptions{}); err != nil {
				return "", err
			}
			e, err := f.Stat(ctx, "d")
			return entryFacts(e), err
		})},
		{"remove an empty dir", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			if err := f.Mkdir(ctx, "emptydir"); err != nil {
				return "", err
			}
			return "", f.Remove(ctx, "emptydir", sandbox.RemoveOptions{})
		})},
		{"move a dir into itself", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.Move(ctx, "d", "d/inner", sandbox.MoveOptions{})
		})},
		{"move a file onto itself", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.Move(ctx, "empty", "empty", sandbox.MoveOptions{Overwrite: true})
		})},
		{"remove a non-empty dir", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.Remove(ctx, "d", sandbox.RemoveOptions{})
		})},
		{"write below a link to a dir", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			if _, err := ln("d", "ld2")(ctx, sb); err != nil {
				return "", err
			}
			if err := sb.Files.Write(ctx, "ld2/via-link.txt", []byte("v"), 0); err != nil {
				return "", err
			}
			return st("d/via-link.txt")(ctx, sb)
		}},
		{"glob below a missing dir", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			r, err := f.Glob(ctx, "*", "nope")
			if r == nil {
				return "", err
			}
			return fmt.Sprint(r.Paths), err
		})},
		{"glob below a file", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			r, err := f.Glob(ctx, "*.txt", "d/f.txt")
			if r == nil {
				return "", err
			}
			return fmt.Sprint(r.Paths), err
		})},
		{"glob", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			r, err := f.Glob(ctx, "**/*.txt", "")
			if r == nil {
				return "", err
			}
			return fmt.Sprint(r.Paths), err
		})},
		{"search a single file", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			r, err := f.Search(ctx, sandbox.SearchOptions{Pattern: "t.o", Path: "d/f.txt"})
			if r == nil {
				return "", err
			}
			return fmt.Sprintf("%v files=%d", r.Matches, r.Files), err
		})},
		{"search a missing dir", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			_, err := f.Search(ctx, sandbox.SearchOptions{Pattern: "x", Path: "nope"})
			return "", err
		})},
		{"search with a bad include glob", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			_, err := f.Search(ctx, sandbox.SearchOptions{Pattern: "x", Include: []string{"["}})
			return "", err
		})},
		{"copy in", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			if err := f.CopyIn(ctx, "in", tarOf(map[string]string{"a/": "", "a/one.txt": "1"})); err != nil {
				return "", err
			}
			e, err := f.Stat(ctx, "in/a/one.txt")
			return entryFacts(e), err
		})},
		{"copy in an entry leading out", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.CopyIn(ctx, "in", tarOf(map[string]string{"../evil": "x"}))
		})},
		{"copy in an absolute entry", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.CopyIn(ctx, "in", tarOf(map[string]string{"/abs": "x"}))
		})},
		{"copy in to a path outside", fop(func(ctx context.Context, f *sandbox.Files) (string, error) {
			return "", f.CopyIn(ctx, "../in", tarOf(map[string]string{"a/one.txt": "x"}))
		})},
		{"the final tree", ls("", sandbox.ListOptions{Depth: 5, Hidden: true})},
	})
}
