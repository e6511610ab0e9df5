package server

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// A small read answered with raw system calls (readSmallRaw) answers
// exactly what the ordinary path through os.Root answers, for every kind
// of path: the plain ones take the raw path, and everything it cannot
// judge (links, FIFOs, directories, escapes, large files, missing files)
// goes the ordinary way with the ordinary error.
func TestSmallReadAnswersAsTheOrdinaryPath(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("k.txt", strings.Repeat("x", 1024))
	write("empty", "")
	write("sub/dir/lines.txt", "one\ntwo\nthree\nfour\n")
	write("bin", "a\x00b")
	write("big", strings.Repeat("y", inlineReadMax+1))
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{"k.txt", "link"}, {"sub", "dirlink"}, {outside + "/secret", "out"}, {"../../../../../../../../" + outside + "/secret", "outrel"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if w.rootFD < 0 {
		t.Skip("no O_PATH descriptor of the workspace here: every read takes the ordinary path")
	}
	for _, c := range []struct {
		name string
		req  wire.FSReadRequest
		raw  bool // answered by readSmallRaw
	}{
		{"1 KB", wire.FSReadRequest{Path: "k.txt"}, true},
		{"absolute", wire.FSReadRequest{Path: dir + "/k.txt"}, true},
		{"empty", wire.FSReadRequest{Path: "empty"}, true},
		{"nested", wire.FSReadRequest{Path: "sub/dir/lines.txt"}, true},
		{"lines", wire.FSReadRequest{Path: "sub/dir/lines.txt", Offset: 1, Limit: 2}, true},
		{"binary", wire.FSReadRequest{Path: "bin"}, true},
		{"truncated by max_bytes", wire.FSReadRequest{Path: "sub/dir/lines.txt", MaxBytes: 5}, false},
		{"link inside", wire.FSReadRequest{Path: "link"}, false},
		{"through a linked directory", wire.FSReadRequest{Path: "dirlink/dir/lines.txt"}, false},
		{"link out", wire.FSReadRequest{Path: "out"}, false},
		{"relative link out", wire.FSReadRequest{Path: "outrel"}, false},
		{"dot-dot out", wire.FSReadRequest{Path: "sub/../../x"}, false},
		{"fifo", wire.FSReadRequest{Path: "fifo"}, false},
		{"directory", wire.FSReadRequest{Path: "sub"}, false},
		{"missing", wire.FSReadRequest{Path: "nope"}, false},
		{"missing parent", wire.FSReadRequest{Path: "nope/x"}, false},
		{"through a file", wire.FSReadRequest{Path: "k.txt/x"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, _, wantErr := w.readUpTo(c.req, -1) // the ordinary path
			got, done, gotErr := w.readUpTo(c.req, inlineReadMax)
			if !done {
				t.Fatal("a small file's read was not answered inline")
			}
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
				t.Errorf("inline read answered %+v, %v; the ordinary path %+v, %v", got, gotErr, want, wantErr)
			}
			if rel, e := w.rel(c.req.Path); e == nil {
				if _, _, ok := w.readSmallRaw(rel, min(inlineReadMax, readMax(c.req))); ok != c.raw {
					t.Errorf("readSmallRaw answered: %v, want %v", ok, c.raw)
				}
			}
		})
	}
	// A file over the inline limit is left to a handler (done false).
	if _, done, _ := w.readUpTo(wire.FSReadRequest{Path: "big"}, inlineReadMax); done {
		t.Error("a file over the inline limit was read on the read loop")
	}
	if _, _, ok := w.readSmallRaw("big", inlineReadMax); ok {
		t.Error("readSmallRaw read a file over its limit")
	}
}
