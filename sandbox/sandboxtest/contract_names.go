package sandboxtest

import (
	"archive/tar"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Names and text a file system or a model cannot take as they are (issue
// 17), in the Files group.

// testLongNames: a name over the file system's 255 bytes is an argument
// error with a message of bounded size (a 5,000-character name gave
// SBX_INTERNAL with about 10 KB of message), on every call and in tar
// entries; the sandbox stays usable.
func testLongNames(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	long := strings.Repeat("n", 5000) + ".txt"
	deep := strings.Repeat("d/", 2100) + "f.txt"
	bounded := func(what string, err error) {
		t.Helper()
		wantCode(t, what, err, sandbox.CodeInvalidArgument)
		if len(err.Error()) > 600 {
			t.Fatalf("%s: the error message is %d bytes long", what, len(err.Error()))
		}
	}
	bounded("Write of a 5,000-character name", b.sb.Files.Write(b.ctx(), long, []byte("x"), 0))
	_, err := b.sb.Files.ReadFile(b.ctx(), long)
	bounded("Read of a 5,000-character name", err)
	bounded("Mkdir of a 5,000-character name", b.sb.Files.Mkdir(b.ctx(), "dir/"+long))
	bounded("Write of a 4,200-byte path", b.sb.Files.Write(b.ctx(), deep, []byte("x"), 0))
	err = b.sb.Files.CopyIn(b.ctx(), "", makeTar(t, []tarFile{{name: long, body: "x", mode: 0o644, typ: tar.TypeReg}}))
	bounded("CopyIn of an entry with a 5,000-character name", err)
	b.usable()
}

// testControlCharacterNames: a path with a newline or another control
// character is refused when it would create a file (it listed as two
// entries); one a command made can still be read and removed.
func testControlCharacterNames(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("ok.txt", "x")
	for _, p := range []string{"two\nlines.txt", "tab\there", "bell\a", "esc\x1b[2J"} {
		wantCode(t, "Write of "+p, b.sb.Files.Write(b.ctx(), p, []byte("x"), 0), sandbox.CodeInvalidArgument)
		wantCode(t, "Mkdir of "+p, b.sb.Files.Mkdir(b.ctx(), p), sandbox.CodeInvalidArgument)
		wantCode(t, "Move to "+p, b.sb.Files.Move(b.ctx(), "ok.txt", p, sandbox.MoveOptions{}), sandbox.CodeInvalidArgument)
		wantCode(t, "Copy to "+p, b.sb.Files.Copy(b.ctx(), "ok.txt", p, sandbox.CopyOptions{}), sandbox.CodeInvalidArgument)
		wantCode(t, "CopyIn into "+p, b.sb.Files.CopyIn(b.ctx(), p, makeTar(t, []tarFile{{name: "a", body: "x", mode: 0o644, typ: tar.TypeReg}})), sandbox.CodeInvalidArgument)
		err := b.sb.Files.CopyIn(b.ctx(), "", makeTar(t, []tarFile{{name: p, body: "x", mode: 0o644, typ: tar.TypeReg}}))
		wantCode(t, "CopyIn of an entry named "+p, err, sandbox.CodeInvalidArgument)
	}
	wantMessage(t, "Write of a name with a newline", b.sb.Files.Write(b.ctx(), "a\nb", nil, 0), "control character")
	l, err := b.sb.Files.List(b.ctx(), "", sandbox.ListOptions{Hidden: true, Depth: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(l.Entries); len(got) != 1 || got[0] != "ok.txt" {
		t.Fatalf("refused names left entries behind: %q", got)
	}
	b.usable()
}

// testInvalidUTF8Content: content that is not valid UTF-8 is returned as
// it is and flagged, so that a text view showing U+FFFD for the bad bytes
// can say so (it was replaced without telling anyone).
func testInvalidUTF8Content(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	latin1 := "caf\xe9 au lait\n"
	b.write("latin1.txt", latin1)
	b.write("utf8.txt", "café au lait\n")
	for _, c := range []struct {
		path    string
		invalid bool
	}{{"latin1.txt", true}, {"utf8.txt", false}} {
		for _, opt := range []sandbox.ReadOptions{{}, {Limit: 10}} {
			got, err := b.sb.Files.Read(b.ctx(), c.path, opt)
			if err != nil {
				t.Fatal(err)
			}
			if got.InvalidUTF8 != c.invalid {
				t.Fatalf("Read(%s, %+v): InvalidUTF8 = %v, want %v", c.path, opt, got.InvalidUTF8, c.invalid)
			}
		}
	}
	if got := b.read("latin1.txt"); got != latin1 {
		t.Fatalf("the bytes were changed: read %q", got)
	}
	res, err := b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: "au lait"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Matches {
		want := m.Path == "latin1.txt"
		if m.InvalidUTF8 != want {
			t.Fatalf("match %+v: InvalidUTF8 = %v, want %v", m, m.InvalidUTF8, want)
		}
		if want && m.Text != "caf\uFFFD au lait" {
			t.Fatalf("match text %q, want the bad byte shown as U+FFFD", m.Text)
		}
	}
	if len(res.Matches) != 2 {
		t.Fatalf("search found %+v, want both files", res.Matches)
	}
}
