package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Every write of the file API replaces its target atomically or leaves it
// untouched (issue 17: an ENOSPC fallback that rewrote files in place left
// 5 MiB of new bytes where a 4 MiB file had been, CopyIn killed mid-way
// left torn files, writes through a symbolic link were torn for readers).
// The new content goes into a temporary sibling of the target, which is
// renamed over it. The cost, accepted: replacing a file needs room for
// both copies, and a write that does not fit fails with the old file
// intact and an error that says so.

// tempPrefix names the temporary files of replaceFile. A temporary file is
// held under flock(2) by its writer until it is renamed or removed, so a
// sweep (sweepTemps) removes only those whose writer is gone.
const tempPrefix = ".sbx-tmp-"

// replaceFile gives rel new content: fill writes it into a temporary
// sibling of the file, which is then renamed over it. A symbolic link at
// rel is followed (where it stays inside the workspace) and the file it
// leads to is replaced, so that a reader through the link also sees the
// old or the new content, never a mix. mode 0 keeps the old file's mode
// (0644 for a new file). A failure of fill is returned as it is when it is
// a *WireError, else mapped as a write error; either way the old file is
// untouched and the temporary file removed.
func (w *workspace) replaceFile(rel, shown string, mode fs.FileMode, fill func(f *os.File) error) *wire.WireError {
	target, e := w.resolveLinks(rel, shown)
	if e != nil {
		return e
	}
	if target == "." {
		return wire.Errorf(wire.CodeIsDir, "%q is the workspace directory: give a file name", shown)
	}
	old, err := w.root.Lstat(target)
	switch {
	case err == nil && old.IsDir():
		return wire.Errorf(wire.CodeIsDir, "%q is a directory", shown)
	case err == nil && !old.Mode().IsRegular():
		// A FIFO, socket or device a command made: not the file API's
		// to replace.
		return wire.Errorf(wire.CodeInvalidArgument, "%q is not a regular file", shown)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fsError(shown, err)
	case err != nil:
		old = nil
	}
	if mode == 0 && old != nil {
		mode = old.Mode().Perm()
	}
	if mode == 0 {
		mode = 0o644
	}
	if dir := filepath.Dir(target); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return w.writeError(shown, err, old != nil)
		}
	}
	f, tmp, err := w.createTemp(filepath.Dir(target), mode)
	if err != nil {
		return w.writeError(shown, err, old != nil)
	}
	renamed := false
	defer func() {
		if !renamed {
			f.Close()
			_ = w.root.Remove(tmp)
		}
	}()
	if old != nil {
		// A replaced file keeps its owner where the agent may set it
		// (as root); otherwise it belongs to the agent, as a file a
		// command rewrites with mv would.
		keepOwner(f, old)
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(mode) // the umask may have narrowed the create mode
	}
	if err != nil {
		var we *wire.WireError
		if errors.As(err, &we) {
			return we
		}
		return w.writeError(shown, err, old != nil)
	}
	// The lock createTemp took tells a sweep (sweepTemps: every agent
	// runs one as it starts, maybe on a workspace this one writes to)
	// that the file's writer is alive; closing f would release it before
	// the rename, and a sweep in between took the file (the write then
	// failed with NOT_FOUND). A duplicate descriptor shares the lock and
	// holds it until the rename is done.
	defer holdLock(f)()
	if err := f.Close(); err != nil {
		renamed = true // closed: the deferred cleanup only removes
		_ = w.root.Remove(tmp)
		return w.writeError(shown, err, old != nil)
	}
	if err := w.root.Rename(tmp, target); err != nil {
		renamed = true
		_ = w.root.Remove(tmp)
		return w.writeError(shown, err, old != nil)
	}
	renamed = true
	return nil
}

// resolveLinks follows symbolic links at the last component of rel, as an
// open would, and returns the path (relative to the workspace) of what
// they lead to. Like os.Root, it refuses a link to an absolute path or out
// of the workspace. Relative targets are joined lexically to the link's
// directory; every path it returns is still opened through os.Root.
func (w *workspace) resolveLinks(rel, shown string) (string, *wire.WireError) {
	p := rel
	for range 40 { // the kernel's own limit on links in a path
		fi, err := w.root.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		link, err := w.root.Readlink(p)
		if err != nil {
			return "", fsError(shown, err)
		}
		next := filepath.Clean(filepath.Join(filepath.Dir(p), link))
		if filepath.IsAbs(link) || next == ".." || strings.HasPrefix(next, "../") {
			return "", wire.Errorf(wire.CodePathEscape, "path %q resolves outside the workspace (through a symbolic link to %q): access denied", shown, link)
		}
		p = next
	}
	return "", wire.Errorf(wire.CodePathEscape, "%q is a symbolic link loop or a link that cannot be followed safely", shown)
}

// createTemp creates and locks a new temporary file in dir.
func (w *workspace) createTemp(dir string, mode fs.FileMode) (*os.File, string, error) {
	var b [8]byte
	for range 100 {
		_, _ = rand.Read(b[:])
		name := filepath.Join(dir, tempPrefix+hex.EncodeToString(b[:]))
		// Owner-writable whatever the final mode: fill writes through f.
		f, err := w.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		// The lock says "a writer is alive" to sweepTemps. A sweep that
		// locked the file first (between our create and this lock) has
		// unlinked it: then start over with a new name.
		if lockTemp(f) {
			f.Close()
			continue
		}
		return f, name, nil
	}
	return nil, "", fmt.Errorf("no unused temporary name in %q", dir)
}

// sweepTemps removes the temporary files of writers that are gone (a
// sandbox killed during a write or CopyIn, the host's SIGKILL) from the
// whole workspace, and returns how many. A file whose writer is alive, in
// this sandbox or another on a shared workspace, is locked and kept. It
// stops early when stop is closed.
func (w *workspace) sweepTemps(stop <-chan struct{}) int {
	removed := 0
	_ = fs.WalkDir(w.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		select {
		case <-stop:
			return fs.SkipAll
		default:
		}
		if err != nil || !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		f, err := w.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			f, err = w.root.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		}
		if err != nil {
			return nil
		}
		defer f.Close()
		if !tryLock(f) {
			return nil // a live writer holds it
		}
		if w.root.Remove(p) == nil {
			removed++
		}
		return nil
	})
	return removed
}

// writeError maps a failed write of shown to a coded error. Running out of
// space says whose limit was reached (the sandbox's quota, or the file
// system under the workspace) and, when a file was being replaced, that it
// is unchanged.
func (w *workspace) writeError(shown string, err error, replacing bool) *wire.WireError {
	if errors.Is(err, errCopyTooBig) {
		return wire.Errorf(wire.CodeQuota, "writing %q would make it larger than the %d byte file size limit", shown, w.fsize)
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) || (errno != syscall.ENOSPC && errno != syscall.EDQUOT) {
		return fsError(shown, err)
	}
	kept := ""
	if replacing {
		kept = fmt.Sprintf(" %q is unchanged: a file is replaced by writing the new content beside the old and renaming it over, so replacing it needs room for both.", shown)
	}
	total, free := diskSpace(w.host)
	// The quota is the full file system when the backend sized one for
	// it (Docker's tmpfs): about DiskBytes big.
	if w.disk > 0 && (errno == syscall.EDQUOT || (total >= 0 && total <= w.disk+w.disk/4+1<<20)) {
		return wire.Errorf(wire.CodeQuota, "no space left writing %q: the workspace's disk quota (%d bytes, %d free) is full.%s Delete files, write less, or raise Limits.DiskBytes", shown, w.disk, max(free, 0), kept)
	}
	quota := "no Limits.DiskBytes quota is set"
	if w.disk > 0 {
		quota = fmt.Sprintf("before the workspace's quota of %d bytes was reached", w.disk)
	}
	return wire.Errorf(wire.CodeNoSpace, "no space left writing %q: the file system holding the workspace is full (%d of %d bytes free; %s).%s Delete files, write less, or free space on the host", shown, max(free, 0), total, quota, kept)
}
