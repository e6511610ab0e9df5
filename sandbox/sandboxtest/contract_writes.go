package sandboxtest

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Writes under faults (issue 17), in the Files group: every write path
// replaces its target atomically or leaves it untouched, and leaves no
// temporary file behind.

// testWriteThroughLinkAtomic races readers against writes that go through
// a symbolic link inside the workspace (Write, CopyIn, Copy onto the
// link): a reader, through the link or of the file itself, sees one
// version or the other, never a torn file. (Writes through a link used to
// truncate and rewrite the file in place: 68 torn sizes in 3,250 reads.)
func testWriteThroughLinkAtomic(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffSymlinks)
	versions := []string{strings.Repeat("A", 200<<10), strings.Repeat("B", 300<<10)}
	b.write("real.txt", versions[0])
	b.write("other.txt", versions[1])
	linkBack(b, "link.txt", "real.txt")
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
			var err error
			switch i % 3 {
			case 0:
				err = b.sb.Files.Write(b.ctx(), "link.txt", []byte(versions[i%2]), 0)
			case 1:
				err = b.sb.Files.CopyIn(b.ctx(), "", makeTar(t, []tarFile{{name: "link.txt", body: versions[i%2], mode: 0o644, typ: tar.TypeReg}}))
			case 2:
				err = b.sb.Files.Copy(b.ctx(), "other.txt", "link.txt", sandbox.CopyOptions{Overwrite: true})
			}
			if err != nil {
				t.Errorf("write %d through the link: %v", i, err)
				return
			}
		}
	}()
	for i := range 90 {
		name := []string{"real.txt", "link.txt"}[i%2]
		got, err := b.sb.Files.ReadFile(b.ctx(), name)
		if err != nil {
			t.Fatalf("read of %s during writes: %v", name, err)
		}
		if string(got) != versions[0] && string(got) != versions[1] {
			t.Fatalf("read a torn %s of %d bytes", name, len(got))
		}
	}
	close(stop)
	wg.Wait()
	if st, err := b.sb.Files.Stat(b.ctx(), "link.txt"); err != nil || st.Type != "symlink" {
		t.Fatalf("the link was replaced by a file, not written through: %+v %v", st, err)
	}
	noTemporaryFiles(t, b)
}

// failingReader yields data, then fails with err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// testCopyInFailingSource copies in a tar stream whose source fails inside
// an entry that replaces an existing file: the caller gets the source's
// own error (it used to be SBX_INTERNAL), the old file is intact (it used
// to be truncated), the entries before it are written.
func testCopyInFailingSource(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("dir/old.txt", "the old content\n")
	full := makeTar(t, []tarFile{
		{name: "first.txt", body: "complete\n", mode: 0o644, typ: tar.TypeReg},
		{name: "old.txt", body: strings.Repeat("new ", 256<<10), mode: 0o644, typ: tar.TypeReg},
	}).Bytes()
	cause := errors.New("the disk under the source went away")
	src := &failingReader{data: full[:len(full)/2], err: cause}
	err := b.sb.Files.CopyIn(b.ctx(), "dir", src)
	if err == nil {
		t.Fatal("CopyIn from a failing source reported success")
	}
	if sandbox.CodeOf(err) == sandbox.CodeInternal || !errors.Is(err, cause) {
		t.Fatalf("CopyIn from a failing source: %v; want the source's own error, not SBX_INTERNAL", err)
	}
	if got := b.read("dir/old.txt"); got != "the old content\n" {
		t.Fatalf("a failed CopyIn damaged the file it was replacing: %d bytes now", len(got))
	}
	if got := b.read("dir/first.txt"); got != "complete\n" {
		t.Fatalf("the entry completed before the failure is %q", got)
	}
	// A stream that simply ends inside an entry is refused the same way.
	err = b.sb.Files.CopyIn(b.ctx(), "dir", bytes.NewReader(full[:len(full)/2]))
	if err == nil || sandbox.CodeOf(err) == sandbox.CodeInternal {
		t.Fatalf("CopyIn of a stream cut inside an entry: %v, want a coded error", err)
	}
	if got := b.read("dir/old.txt"); got != "the old content\n" {
		t.Fatalf("a cut CopyIn damaged the file it was replacing: %d bytes now", len(got))
	}
	noTemporaryFiles(t, b)
	b.usable()
}

// noTemporaryFiles fails when a temporary file of an atomic write is left
// anywhere in the workspace.
func noTemporaryFiles(t *testing.T, b *box) {
	t.Helper()
	l, err := b.sb.Files.List(b.ctx(), "", sandbox.ListOptions{Hidden: true, Depth: 20, Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Entries {
		if strings.HasPrefix(e.Path[strings.LastIndexByte(e.Path, '/')+1:], ".sbx-tmp-") {
			t.Fatalf("a temporary file was left in the workspace: %s (%d bytes)", e.Path, e.Size)
		}
	}
}
