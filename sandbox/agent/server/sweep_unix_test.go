//go:build unix

package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"golang.org/x/sys/unix"
)

// Tests of the temporary files of writes in progress, which a writer marks
// live with a flock (Unix only: elsewhere the sweep keeps every one).

// A write in progress (its temporary file) is neither searched nor found
// by name: it is not a file of the workspace yet.
func TestSearchAndGlobSkipWritesInProgress(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.txt", tempPrefix + "0123"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("needle\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Locked, as its writer holds it: the start-up sweep keeps it.
	live := lockedFile(t, filepath.Join(dir, tempPrefix+"0123"))
	defer live.Close()
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	res, werr := w.search(t.Context(), wire.FSSearchRequest{Pattern: "needle"})
	if werr != nil {
		t.Fatal(werr)
	}
	if rep := res.(wire.FSSearchReply); len(rep.Matches) != 1 || rep.Matches[0].Path != "a.txt" {
		t.Errorf("search found %+v, want a.txt only", rep.Matches)
	}
	g, werr := w.glob(wire.FSGlobRequest{Pattern: "*"})
	if werr != nil {
		t.Fatal(werr)
	}
	if rep := g.(wire.FSGlobReply); len(rep.Paths) != 1 || rep.Paths[0] != "a.txt" {
		t.Errorf("glob found %q, want a.txt only", rep.Paths)
	}
}

// lockedFile opens p and holds its flock, as a live writer does.
func lockedFile(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return f
}

// The sweep at start removes the temporary files of dead writers (not
// locked), wherever they are, and keeps those of live ones (locked), which
// may belong to another sandbox on a shared workspace.
func TestSweepRemovesOnlyDeadWritersTemporaries(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub/deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	dead := []string{tempPrefix + "dead1", "sub/deeper/" + tempPrefix + "dead2"}
	alive := "sub/" + tempPrefix + "alive"
	for _, p := range append(append([]string{}, dead...), alive, "sub/.sbx-tmpfile-not-ours", "keep.txt") {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	live := lockedFile(t, filepath.Join(dir, alive))
	defer live.Close()
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	<-w.sweepDone
	w.close()
	for _, p := range dead {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a dead writer's %s survived the sweep (%v)", p, err)
		}
	}
	for _, p := range []string{alive, "sub/.sbx-tmpfile-not-ours", "keep.txt"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("the sweep removed %s: %v", p, err)
		}
	}
}
