package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Every descriptor a search opens is close-on-exec (a command the agent
// starts while a search runs must not inherit a workspace directory or
// file), including a file opened through a symbolic link (os.Root's path, whose descriptor is duplicated; the
// duplicate was not close-on-exec before); and a search — finished,
// stopped at MaxResults or cancelled — leaves no descriptor open.
func TestSearchDescriptorsAreCloseOnExecAndClosed(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"real/sub", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"real/a.txt", "real/sub/b.txt", "other/c.txt", "top.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("needle\nhay\nneedle\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("real", filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if w.rootFD < 0 {
		t.Skip("no openat2 here: searches open through os.Root")
	}
	cloexec := func(what string, fd int) {
		t.Helper()
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("%s: descriptor flags %#x, %v; want FD_CLOEXEC", what, flags, err)
		}
	}
	fd, err := w.openForSearch("linked/a.txt") // through the link: os.Root
	if err != nil {
		t.Fatal(err)
	}
	cloexec("a file opened through a symbolic link", fd)
	unix.Close(fd)
	f, err := searchFS{w}.Open("real/sub/b.txt") // openat2 beneath the root
	if err != nil {
		t.Fatal(err)
	}
	cloexec("a file opened beneath the root", int(f.(fdFile)))
	f.Close()

	// The workspace's sweep of temporaries walks the tree in the
	// background from the start: its descriptors are not the search's
	// (they made this test fail 1 run in 20).
	<-w.sweepDone
	before := openFDs(t)
	for _, req := range []wire.FSSearchRequest{
		{Pattern: "needle"},
		{Pattern: "needle", Path: "linked"},
		{Pattern: "needle", MaxResults: 1},
	} {
		res, werr := w.search(t.Context(), req)
		if werr != nil || len(res.(wire.FSSearchReply).Matches) == 0 {
			t.Fatalf("search %+v: %v", req, werr)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, werr := w.search(ctx, wire.FSSearchRequest{Pattern: "needle"}); werr == nil || werr.Code != wire.CodeCanceled {
		t.Fatalf("a cancelled search: %v, want %s", werr, wire.CodeCanceled)
	}
	for fd, target := range openFDs(t) {
		if _, ok := before[fd]; !ok {
			t.Errorf("descriptor %s (%s) is open after the searches, not before (workspace %s)", fd, target, dir)
		}
	}
}

// openFDs maps the process's open descriptors to what they are.
func openFDs(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	fds := map[string]string{}
	for _, e := range ents {
		// One that is gone by now is no leak: the listing's own
		// descriptor, which takes whatever number is free.
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			fds[e.Name()] = target
		}
	}
	return fds
}
