package sandboxtest

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

var fileTests = []contractTest{
	{name: "WriteThenReadRoundTrips", run: testFileWriteRead},
	{name: "ReadByLineOffsetAndLimit", run: testFileReadLines},
	{name: "ReadSizeCap", run: testFileReadCap},
	{name: "BinaryFileIsDetected", run: testFileBinary},
	{name: "WriteIsAtomic", run: testFileAtomic},
	{name: "WriteCreatesParentsWithMode", run: testFileWriteMode},
	{name: "AppendAddsAtTheEnd", run: testFileAppend},
	{name: "EditReplacesExactlyOnce", run: testFileEdit},
	{name: "ListDepthHiddenSizesTypes", run: testFileList},
	{name: "StatMkdirChmod", run: testFileStatMkdirChmod},
	{name: "MoveAndCopy", run: testFileMoveCopy},
	{name: "RemoveIsRecursiveOnlyWhenAsked", run: testFileRemove},
	{name: "CopyIntoItselfIsRefused", run: testFileCopyIntoItself},
	{name: "MoveIntoItselfIsRefused", run: testFileMoveIntoItself},
	{name: "MoveOntoItsOwnFolderIsRefused", run: testFileMoveOntoAncestor},
	{name: "SearchIncludeExcludeSkips", run: testFileSearch},
	{name: "GlobFindsByName", run: testFileGlob},
	{name: "CopyInCopyOutRoundTrip", run: testFileCopyRoundTrip},
	{name: "AbsolutePathUnderWorkspace", run: testFileAbsolute},
	{name: "NamesAreCaseSensitive", run: testFileNamesAreCaseSensitive}, // platform.go
	// contract_search.go
	{name: "SearchIsLinearOnHostilePatterns", run: testSearchHostilePatterns},
	{name: "SearchMatchesWithinOneLine", run: testSearchWithinOneLine},
	{name: "SearchStopsWhenTheCallerGivesUp", run: testSearchCancel},
	{name: "SearchAtMinOpenFilesLosesNothing", run: testSearchAtMinOpenFiles},
	// contract_writes.go
	{name: "WritesThroughALinkAreAtomic", run: testWriteThroughLinkAtomic},
	{name: "CopyInFromAFailingSourceKeepsTheOldFile", run: testCopyInFailingSource},
	// contract_names.go
	{name: "LongNamesAreInvalidArgumentsWithShortMessages", run: testLongNames},
	{name: "ControlCharactersInNewNamesAreRefused", run: testControlCharacterNames},
	{name: "InvalidUTF8ContentIsFlagged", run: testInvalidUTF8Content},
}

func testFileWriteRead(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("notes.txt", "hello\nworld\n")
	c, err := b.sb.Files.Read(b.ctx(), "notes.txt", sandbox.ReadOptions{})
	if err != nil || string(c.Data) != "hello\nworld\n" || c.Size != 12 || c.Binary || c.Truncated {
		t.Fatalf("Read: %+v %v", c, err)
	}
	// Commands see what the file API wrote, and the reverse.
	if res := b.run(sandbox.Command{Args: []string{"cat", "notes.txt"}}); res.Stdout != "hello\nworld\n" {
		t.Fatalf("cat printed %q", res.Stdout)
	}
	b.run(sandbox.Command{Shell: "printf made-by-sh > from-sh.txt"})
	if got := b.read("from-sh.txt"); got != "made-by-sh" {
		t.Fatalf("read %q", got)
	}
	_, err = b.sb.Files.ReadFile(b.ctx(), "missing.txt")
	wantCode(t, "read of a missing file", err, sandbox.CodeNotFound)
	b.sb.Files.Mkdir(b.ctx(), "adir")
	_, err = b.sb.Files.ReadFile(b.ctx(), "adir")
	wantCode(t, "read of a directory", err, sandbox.CodeIsDir)
	wantCode(t, "write over a directory", b.sb.Files.Write(b.ctx(), "adir", []byte("x"), 0), sandbox.CodeIsDir)
}

func testFileReadLines(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("lines.txt", "l0\nl1\nl2\nl3\nl4")
	for _, tc := range []struct {
		name          string
		offset, limit int
		data          string
		lines         int
		more          bool
	}{
		{"first two", 0, 2, "l0\nl1\n", 2, true},
		{"middle", 1, 2, "l1\nl2\n", 2, true},
		{"last line without newline", 4, 10, "l4", 1, false},
		{"past the end", 9, 1, "", 0, false},
	} {
		c, err := b.sb.Files.Read(b.ctx(), "lines.txt", sandbox.ReadOptions{Offset: tc.offset, Limit: tc.limit})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if string(c.Data) != tc.data || c.Lines != tc.lines || c.More != tc.more {
			t.Errorf("%s: data %q lines %d more %v, want %q %d %v", tc.name, c.Data, c.Lines, c.More, tc.data, tc.lines, tc.more)
		}
	}
	_, err := b.sb.Files.Read(b.ctx(), "lines.txt", sandbox.ReadOptions{Offset: -1, Limit: 1})
	wantCode(t, "negative offset", err, sandbox.CodeInvalidArgument)
}

func testFileReadCap(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("big.txt", strings.Repeat("0123456789\n", 100))
	_, err := b.sb.Files.Read(b.ctx(), "big.txt", sandbox.ReadOptions{MaxBytes: 100})
	wantCode(t, "whole read over MaxBytes", err, sandbox.CodeTooLarge)
	c, err := b.sb.Files.Read(b.ctx(), "big.txt", sandbox.ReadOptions{Limit: 1000, MaxBytes: 100})
	if err != nil || len(c.Data) > 100 || !c.Truncated || !c.More || c.Lines != 9 {
		t.Fatalf("line read capped at 100 bytes: %d bytes, %d lines, truncated %v, more %v, err %v", len(c.Data), c.Lines, c.Truncated, c.More, err)
	}
}

func testFileBinary(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	bin := []byte("\x7fELF\x00\x01\x02Foo\x00")
	if err := b.sb.Files.Write(b.ctx(), "prog.bin", bin, 0); err != nil {
		t.Fatal(err)
	}
	c, err := b.sb.Files.Read(b.ctx(), "prog.bin", sandbox.ReadOptions{})
	if err != nil || !c.Binary || !bytes.Equal(c.Data, bin) {
		t.Fatalf("whole read of a binary file: %+v %v", c, err)
	}
	c, err = b.sb.Files.Read(b.ctx(), "prog.bin", sandbox.ReadOptions{Limit: 10})
	if err != nil || !c.Binary || len(c.Data) != 0 {
		t.Fatalf("line read of a binary file must report it, not dump it: %+v %v", c, err)
	}
	_, err = b.sb.Files.Edit(b.ctx(), "prog.bin", "Foo", "Bar", sandbox.EditOptions{})
	wantCode(t, "edit of a binary file", err, sandbox.CodeBinary)
}

func testFileAtomic(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// A reader racing a writer sees one version or the other, never a mix
	// or a partial file.
	versions := []string{strings.Repeat("A", 200<<10), strings.Repeat("B", 300<<10)}
	b.write("f.txt", versions[0])
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := b.sb.Files.Write(b.ctx(), "f.txt", []byte(versions[i%2]), 0); err != nil {
				t.Errorf("Write: %v", err)
				return
			}
		}
	}()
	for range 60 {
		got, err := b.sb.Files.ReadFile(b.ctx(), "f.txt")
		if err != nil {
			t.Fatalf("read during writes: %v", err)
		}
		if string(got) != versions[0] && string(got) != versions[1] {
			t.Fatalf("read a torn file of %d bytes", len(got))
		}
	}
	close(stop)
	wg.Wait()
	// Temporary files of the atomic write do not stay behind.
	l, err := b.sb.Files.List(b.ctx(), "", sandbox.ListOptions{Hidden: true})
	if err != nil || len(l.Entries) != 1 {
		t.Fatalf("after the writes the workspace holds %+v (%v), want only f.txt", l, err)
	}
}

func testFileWriteMode(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffPermissions)
	if err := b.sb.Files.Write(b.ctx(), "a/b/c/run.sh", []byte("#!/bin/sh\necho ran\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	e, err := b.sb.Files.Stat(b.ctx(), "a/b/c/run.sh")
	if err != nil || e.Mode.Perm() != 0o700 || e.Type != "file" || e.Size != 19 {
		t.Fatalf("Stat: %+v %v", e, err)
	}
	if res := b.run(sandbox.Command{Args: []string{"./a/b/c/run.sh"}}); res.Stdout != "ran\n" {
		t.Fatalf("the written script printed %q", res.Stdout)
	}
	// Mode 0 keeps the existing file's mode.
	b.write("a/b/c/run.sh", "#!/bin/sh\necho again\n")
	if e, _ := b.sb.Files.Stat(b.ctx(), "a/b/c/run.sh"); e.Mode.Perm() != 0o700 {
		t.Fatalf("rewrite with mode 0 changed the mode to %v", e.Mode)
	}
	wantCode(t, "setuid mode", b.sb.Files.Write(b.ctx(), "x", nil, fs.ModeSetuid|0o755), sandbox.CodeInvalidArgument)
}

func testFileAppend(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	for _, part := range []string{"one\n", "two\n"} {
		if err := b.sb.Files.Append(b.ctx(), "log/out.txt", []byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.read("log/out.txt"); got != "one\ntwo\n" {
		t.Fatalf("after two appends: %q", got)
	}
}

func testFileEdit(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("main.py", "x = 1\nx = 1\ny = 2\n")
	for _, tc := range []struct {
		name, old, new string
		all            bool
		code           sandbox.Code
		n              int
		after          string
	}{
		{"no match", "z = 3", "", false, sandbox.CodeNoMatch, 0, "x = 1\nx = 1\ny = 2\n"},
		{"many without replace-all", "x = 1", "x = 9", false, sandbox.CodeAmbiguous, 0, "x = 1\nx = 1\ny = 2\n"},
		{"empty old text", "", "q", false, sandbox.CodeInvalidArgument, 0, "x = 1\nx = 1\ny = 2\n"},
		{"exactly one", "y = 2", "y = 3", false, "", 1, "x = 1\nx = 1\ny = 3\n"},
		{"many with replace-all", "x = 1", "x = 9", true, "", 2, "x = 9\nx = 9\ny = 3\n"},
	} {
		n, err := b.sb.Files.Edit(b.ctx(), "main.py", tc.old, tc.new, sandbox.EditOptions{ReplaceAll: tc.all})
		if tc.code != "" {
			wantCode(t, tc.name, err, tc.code)
		} else if err != nil || n != tc.n {
			t.Fatalf("%s: %d replacements, %v; want %d", tc.name, n, err, tc.n)
		}
		if got := b.read("main.py"); got != tc.after {
			t.Fatalf("%s: file is %q, want %q", tc.name, got, tc.after)
		}
	}
	_, err := b.sb.Files.Edit(b.ctx(), "main.py", "x = 9", "x = 0", sandbox.EditOptions{})
	if err == nil || !strings.Contains(err.Error(), "lines 1, 2") {
		t.Fatalf("an ambiguous edit should name the lines: %v", err)
	}
}

func paths(es []sandbox.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path)
	}
	slices.Sort(out)
	return out
}

func testFileList(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffSymlinks)
	b.write("a/b/c/deep.txt", "deep")
	b.write("a/top.txt", "12345")
	b.write(".hidden/x", "h")
	b.write("root.txt", "r")
	b.run(sandbox.Command{Args: []string{"ln", "-s", "root.txt", "link"}})
	for _, tc := range []struct {
		name string
		opt  sandbox.ListOptions
		want []string
	}{
		{"default depth 1", sandbox.ListOptions{}, []string{"a", "link", "root.txt"}},
		{"depth 2", sandbox.ListOptions{Depth: 2}, []string{"a", "a/b", "a/top.txt", "link", "root.txt"}},
		{"depth 4", sandbox.ListOptions{Depth: 4}, []string{"a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/top.txt", "link", "root.txt"}},
		{"hidden", sandbox.ListOptions{Hidden: true}, []string{".hidden", "a", "link", "root.txt"}},
	} {
		l, err := b.sb.Files.List(b.ctx(), "", tc.opt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := paths(l.Entries); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	l, err := b.sb.Files.List(b.ctx(), "a", sandbox.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, e := range l.Entries {
		types[e.Path] = e.Type
		if e.Path == "a/top.txt" && e.Size != 5 {
			t.Errorf("a/top.txt has size %d, want 5", e.Size)
		}
	}
	if types["a/b"] != "dir" || types["a/top.txt"] != "file" {
		t.Errorf("types %v", types)
	}
	l, _ = b.sb.Files.List(b.ctx(), "", sandbox.ListOptions{})
	for _, e := range l.Entries {
		if e.Path == "link" && (e.Type != "symlink" || e.Target != "root.txt") {
			t.Errorf("link: %+v", e)
		}
	}
	l, err = b.sb.Files.List(b.ctx(), "", sandbox.ListOptions{Depth: 4, Max: 2})
	if err != nil || len(l.Entries) != 2 || !l.Truncated {
		t.Fatalf("Max 2: %d entries, truncated %v, %v", len(l.Entries), l.Truncated, err)
	}
	_, err = b.sb.Files.List(b.ctx(), "nope", sandbox.ListOptions{})
	wantCode(t, "list of a missing dir", err, sandbox.CodeNotFound)
}

func testFileStatMkdirChmod(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffPermissions)
	if err := b.sb.Files.Mkdir(b.ctx(), "x/y/z"); err != nil {
		t.Fatal(err)
	}
	if e, err := b.sb.Files.Stat(b.ctx(), "x/y/z"); err != nil || e.Type != "dir" || e.Path != "x/y/z" {
		t.Fatalf("Stat of a made dir: %+v %v", e, err)
	}
	if err := b.sb.Files.Mkdir(b.ctx(), "x/y/z"); err != nil {
		t.Fatalf("Mkdir of an existing dir: %v", err)
	}
	b.write("s.sh", "#!/bin/sh\necho chmodded\n")
	if err := b.sb.Files.Chmod(b.ctx(), "s.sh", 0o755); err != nil {
		t.Fatal(err)
	}
	if e, _ := b.sb.Files.Stat(b.ctx(), "s.sh"); e.Mode.Perm() != 0o755 {
		t.Fatalf("mode after Chmod 0755: %v", e.Mode)
	}
	if res := b.run(sandbox.Command{Args: []string{"./s.sh"}}); res.Stdout != "chmodded\n" {
		t.Fatalf("%q", res.Stdout)
	}
	wantCode(t, "Chmod setuid", b.sb.Files.Chmod(b.ctx(), "s.sh", fs.ModeSetuid|0o755), sandbox.CodeInvalidArgument)
	_, err := b.sb.Files.Stat(b.ctx(), "nope")
	wantCode(t, "Stat of a missing path", err, sandbox.CodeNotFound)
	b.write("plain", "p")
	wantCode(t, "Mkdir under a file", b.sb.Files.Mkdir(b.ctx(), "plain/sub"), sandbox.CodeNotDir)
}

func testFileMoveCopy(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("src/a.txt", "A")
	b.write("src/sub/b.txt", "B")
	b.write("other.txt", "O")
	if err := b.sb.Files.Copy(b.ctx(), "src", "copy", sandbox.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b.read("copy/a.txt") != "A" || b.read("copy/sub/b.txt") != "B" {
		t.Fatal("Copy of a tree lost content")
	}
	wantCode(t, "Copy onto an existing file", b.sb.Files.Copy(b.ctx(), "other.txt", "src/a.txt", sandbox.CopyOptions{}), sandbox.CodeExists)
	wantCode(t, "Copy into itself", b.sb.Files.Copy(b.ctx(), "src", "src/inner", sandbox.CopyOptions{}), sandbox.CodeInvalidArgument)
	wantCode(t, "Move onto an existing file", b.sb.Files.Move(b.ctx(), "other.txt", "src/a.txt", sandbox.MoveOptions{}), sandbox.CodeExists)
	if err := b.sb.Files.Move(b.ctx(), "other.txt", "src/a.txt", sandbox.MoveOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if b.read("src/a.txt") != "O" {
		t.Fatal("Move with overwrite did not replace the file")
	}
	if _, err := b.sb.Files.Stat(b.ctx(), "other.txt"); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("the moved file is still there: %v", err)
	}
	if err := b.sb.Files.Move(b.ctx(), "src", "new/place", sandbox.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if b.read("new/place/sub/b.txt") != "B" {
		t.Fatal("Move of a tree lost content")
	}
	wantCode(t, "Move of a missing file", b.sb.Files.Move(b.ctx(), "gone", "x", sandbox.MoveOptions{}), sandbox.CodeNotFound)
}

func testFileRemove(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("d/e/f.txt", "f")
	err := b.sb.Files.Remove(b.ctx(), "d", sandbox.RemoveOptions{})
	wantCode(t, "Remove of a non-empty directory without recursive", err, sandbox.CodeInvalidArgument)
	wantMessage(t, "Remove of a non-empty directory without recursive", err, "not empty", "recursive")
	if b.read("d/e/f.txt") != "f" {
		t.Fatal("a refused Remove deleted content")
	}
	if err := b.sb.Files.Remove(b.ctx(), "d", sandbox.RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sb.Files.Stat(b.ctx(), "d"); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("after a recursive Remove: %v", err)
	}
	b.write("single", "s")
	if err := b.sb.Files.Remove(b.ctx(), "single", sandbox.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "Remove of the workspace", b.sb.Files.Remove(b.ctx(), ".", sandbox.RemoveOptions{Recursive: true}), sandbox.CodeInvalidArgument)
	wantCode(t, "Remove of a missing file", b.sb.Files.Remove(b.ctx(), "single", sandbox.RemoveOptions{}), sandbox.CodeNotFound)
}

// wantMessage fails unless err's message contains every one of words: a
// model can only act on an error that says what to do.
func wantMessage(t *testing.T, what string, err error, words ...string) {
	t.Helper()
	for _, w := range words {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: error %v does not say %q", what, err, w)
		}
	}
}

// linkBack makes the workspace symbolic link name pointing at target,
// through CopyIn so every backend can make it.
func linkBack(b *box, name, target string) {
	b.t.Helper()
	tb := makeTar(b.t, []tarFile{{name: name, link: target, mode: 0o777, typ: tar.TypeSymlink}})
	if err := b.sb.Files.CopyIn(b.ctx(), "", tb); err != nil {
		b.t.Fatalf("CopyIn of link %s -> %s: %v", name, target, err)
	}
}

// testFileCopyIntoItself: copying a directory below itself would copy its
// own copy forever; it must be refused at once, before anything is made.
func testFileCopyIntoItself(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffSymlinks)
	b.write("top.txt", "T")
	b.write("src/a.txt", "A")
	linkBack(b, "loop", "src")
	for _, tc := range []struct{ name, from, to string }{
		{"workspace root into a subfolder", "", "sub"},
		{"workspace root as \".\" into a subfolder", ".", "sub/deeper"},
		{"directory into its subfolder", "src", "src/inner"},
		{"directory through a link into itself", "src", "loop/inner"},
	} {
		err := b.sb.Files.Copy(b.ctx(), tc.from, tc.to, sandbox.CopyOptions{})
		wantCode(t, tc.name, err, sandbox.CodeInvalidArgument)
		wantMessage(t, tc.name, err, "into itself")
	}
	for _, p := range []string{"sub", "src/inner"} {
		if _, err := b.sb.Files.Stat(b.ctx(), p); sandbox.CodeOf(err) != sandbox.CodeNotFound {
			t.Errorf("a refused Copy left %q behind: %v", p, err)
		}
	}
	// The refusal is about the tree, not the name: a sibling is fine.
	if err := b.sb.Files.Copy(b.ctx(), "src", "src-copy", sandbox.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b.read("src-copy/a.txt") != "A" {
		t.Fatal("Copy to a sibling lost content")
	}
}

// testFileMoveIntoItself: the kernel refuses to rename a directory below
// itself; the refusal must be a coded argument error, and moving a
// directory onto itself must not delete it.
func testFileMoveIntoItself(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffSymlinks)
	b.write("src/a.txt", "A")
	linkBack(b, "loop", "src")
	linkBack(b, "here", ".")
	for _, tc := range []struct {
		name, from, to string
		overwrite      bool
	}{
		{"directory into its subfolder", "src", "src/inner", false},
		{"directory into an existing subfolder", "src", "src/a.txt/x", false},
		{"directory through a link into itself", "src", "loop/inner", false},
		{"directory onto itself with overwrite", "src", "src", true},
		{"directory onto itself through a link with overwrite", "src", "here/src", true},
	} {
		err := b.sb.Files.Move(b.ctx(), tc.from, tc.to, sandbox.MoveOptions{Overwrite: tc.overwrite})
		wantCode(t, tc.name, err, sandbox.CodeInvalidArgument)
		wantMessage(t, tc.name, err, "into itself")
		if b.read("src/a.txt") != "A" {
			t.Fatalf("%s: a refused Move changed the directory", tc.name)
		}
	}
	if err := b.sb.Files.Move(b.ctx(), "src", "moved/src", sandbox.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if b.read("moved/src/a.txt") != "A" {
		t.Fatal("Move to another folder lost content")
	}
}

// testFileMoveOntoAncestor: Move with overwrite onto a directory that holds
// the source would remove that directory, source included, before the
// rename; it must be refused before anything is removed.
func testFileMoveOntoAncestor(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffSymlinks)
	b.write("a/b/keep.txt", "precious")
	b.write("a/note.txt", "note")
	linkBack(b, "alink", "a")
	for _, tc := range []struct{ name, from, to string }{
		{"directory onto its parent", "a/b", "a"},
		{"file onto its grandparent", "a/b/keep.txt", "a"},
		{"directory onto its parent reached through a link", "alink/b", "a"},
	} {
		err := b.sb.Files.Move(b.ctx(), tc.from, tc.to, sandbox.MoveOptions{Overwrite: true})
		wantCode(t, tc.name, err, sandbox.CodeInvalidArgument)
		wantMessage(t, tc.name, err, "contains it")
		if b.read("a/b/keep.txt") != "precious" || b.read("a/note.txt") != "note" {
			t.Fatalf("%s: a refused Move deleted files", tc.name)
		}
	}
	// Replacing an unrelated directory still works.
	b.write("other/old.txt", "old")
	if err := b.sb.Files.Move(b.ctx(), "a/b", "other", sandbox.MoveOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if b.read("other/keep.txt") != "precious" {
		t.Fatal("Move onto an unrelated directory lost content")
	}
}

func testFileSearch(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("src/main.go", "package main\n\nfunc Foo() {}\n// call Foo here\n")
	b.write("src/util.py", "def foo():\n    pass\n")
	b.write("docs/readme.md", "Foo is documented\n")
	b.write(".git/config", "Foo in git\n")
	b.write("node_modules/lib/index.js", "Foo in node_modules\n")
	if err := b.sb.Files.Write(b.ctx(), "blob.bin", []byte("Foo\x00\x01binary"), 0); err != nil {
		t.Fatal(err)
	}
	key := func(ms []sandbox.Match) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Path+":"+itoa(m.Line)+":"+m.Text)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		opt    sandbox.SearchOptions
		want   []string
		binary int
	}{
		{"default skips .git, node_modules and binaries", sandbox.SearchOptions{Pattern: "Foo"},
			[]string{"docs/readme.md:1:Foo is documented", "src/main.go:3:func Foo() {}", "src/main.go:4:// call Foo here"}, 1},
		{"include by base name, ignore case", sandbox.SearchOptions{Pattern: "def FOO", Include: []string{"*.py"}, IgnoreCase: true},
			[]string{"src/util.py:1:def foo():"}, 0},
		{"exclude", sandbox.SearchOptions{Pattern: "Foo", Exclude: []string{"*.go", "*.bin"}},
			[]string{"docs/readme.md:1:Foo is documented"}, 0},
		{"include with a path glob", sandbox.SearchOptions{Pattern: "Foo", Include: []string{"src/**/*.go"}},
			[]string{"src/main.go:3:func Foo() {}", "src/main.go:4:// call Foo here"}, 0},
		{"regex", sandbox.SearchOptions{Pattern: `^func \w+\(`}, []string{"src/main.go:3:func Foo() {}"}, 0},
		{"below a path", sandbox.SearchOptions{Pattern: "Foo", Path: "docs"}, []string{"docs/readme.md:1:Foo is documented"}, 0},
		{"all includes .git and node_modules", sandbox.SearchOptions{Pattern: "Foo in", All: true},
			[]string{".git/config:1:Foo in git", "node_modules/lib/index.js:1:Foo in node_modules"}, 0},
	} {
		r, err := b.sb.Files.Search(b.ctx(), tc.opt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := key(r.Matches); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if r.SkippedBinary != tc.binary {
			t.Errorf("%s: SkippedBinary %d, want %d", tc.name, r.SkippedBinary, tc.binary)
		}
	}
	r, err := b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: "Foo", MaxResults: 1})
	if err != nil || len(r.Matches) != 1 || !r.Truncated {
		t.Fatalf("MaxResults 1: %+v %v", r, err)
	}
	_, err = b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: "func("})
	wantCode(t, "bad regex", err, sandbox.CodeInvalidArgument)
	_, err = b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: ""})
	wantCode(t, "empty pattern", err, sandbox.CodeInvalidArgument)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func testFileGlob(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	for _, p := range []string{"a.go", "pkg/b.go", "pkg/deep/c.go", "pkg/d.txt", "node_modules/e.go"} {
		b.write(p, "x")
	}
	for _, tc := range []struct {
		pattern, dir string
		want         []string
	}{
		{"*.go", "", []string{"a.go", "pkg/b.go", "pkg/deep/c.go"}},
		{"pkg/**/*.go", "", []string{"pkg/b.go", "pkg/deep/c.go"}},
		{"*.txt", "pkg", []string{"pkg/d.txt"}},
		{"*.rs", "", nil},
	} {
		r, err := b.sb.Files.Glob(b.ctx(), tc.pattern, tc.dir)
		if err != nil {
			t.Fatalf("%q: %v", tc.pattern, err)
		}
		if len(r.Paths) != len(tc.want) || (len(tc.want) > 0 && !slices.Equal(r.Paths, tc.want)) {
			t.Errorf("Glob(%q, %q) = %q, want %q", tc.pattern, tc.dir, r.Paths, tc.want)
		}
	}
	_, err := b.sb.Files.Glob(b.ctx(), "[", "")
	wantCode(t, "bad glob", err, sandbox.CodeInvalidArgument)
}

type tarFile struct {
	name, body, link string
	mode             int64
	typ              byte
}

func makeTar(t *testing.T, files []tarFile) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Typeflag: f.typ, Linkname: f.link}
		if f.typ == tar.TypeReg {
			h.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func readTar(t *testing.T, r io.Reader) map[string]tarFile {
	t.Helper()
	out := map[string]tarFile{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("CopyOut produced a bad tar stream: %v", err)
		}
		body, _ := io.ReadAll(tr)
		out[strings.TrimSuffix(h.Name, "/")] = tarFile{name: h.Name, body: string(body), link: h.Linkname, mode: h.Mode & 0o777, typ: h.Typeflag}
	}
}

func testFileCopyRoundTrip(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffSymlinks, diffPermissions)
	big := strings.Repeat("0123456789abcdef", 200<<10) // 3.2 MB: past the flow-control window
	in := []tarFile{
		{name: "proj/", mode: 0o755, typ: tar.TypeDir},
		{name: "proj/run.sh", body: "#!/bin/sh\necho hi\n", mode: 0o755, typ: tar.TypeReg},
		{name: "proj/data/big.txt", body: big, mode: 0o600, typ: tar.TypeReg},
		{name: "proj/link", link: "run.sh", mode: 0o777, typ: tar.TypeSymlink},
	}
	if err := b.sb.Files.CopyIn(b.ctx(), "dst", makeTar(t, in)); err != nil {
		t.Fatal(err)
	}
	if got := b.read("dst/proj/data/big.txt"); got != big {
		t.Fatalf("CopyIn wrote %d bytes of the big file, want %d", len(got), len(big))
	}
	if e, _ := b.sb.Files.Stat(b.ctx(), "dst/proj/run.sh"); e.Mode.Perm() != 0o755 {
		t.Fatalf("CopyIn lost the mode: %v", e.Mode)
	}
	var out bytes.Buffer
	if err := b.sb.Files.CopyOut(b.ctx(), "dst", &out); err != nil {
		t.Fatal(err)
	}
	got := readTar(t, &out)
	for _, f := range in {
		g, ok := got[strings.TrimSuffix(f.name, "/")]
		if !ok {
			t.Errorf("CopyOut lacks %s (has %v)", f.name, keys(got))
			continue
		}
		if g.typ != f.typ || g.body != f.body || g.link != f.link || (f.typ != tar.TypeSymlink && g.mode != f.mode) {
			t.Errorf("%s came back as type %c mode %o link %q, %d bytes", f.name, g.typ, g.mode, g.link, len(g.body))
		}
	}
	// A single file comes out under its base name.
	out.Reset()
	if err := b.sb.Files.CopyOut(b.ctx(), "dst/proj/run.sh", &out); err != nil {
		t.Fatal(err)
	}
	if one := readTar(t, &out); len(one) != 1 || one["run.sh"].body != "#!/bin/sh\necho hi\n" {
		t.Fatalf("CopyOut of a file: %v", keys(one))
	}
	wantCode(t, "CopyOut of a missing path", b.sb.Files.CopyOut(b.ctx(), "missing", io.Discard), sandbox.CodeNotFound)
	wantCode(t, "CopyIn of garbage", b.sb.Files.CopyIn(b.ctx(), "g", strings.NewReader(strings.Repeat("not a tar ", 100))), sandbox.CodeInvalidArgument)
	b.usable()
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func testFileAbsolute(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	ws := b.sb.Info().Workspace
	if err := b.sb.Files.Write(b.ctx(), ws+"/abs.txt", []byte("abs"), 0); err != nil {
		t.Fatal(err)
	}
	if b.read("abs.txt") != "abs" || b.read(ws+"/./abs.txt") != "abs" {
		t.Fatal("an absolute path under the workspace does not name the same file")
	}
}
