//go:build !unix

package server

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// The stand-ins for sys_unix.go where there are no Unix system calls
// (Windows). The agent serves sandboxes only on Linux; on Windows the
// server runs in tests (the fake sandbox) on a directory of the host, and
// each stand-in falls back to a portable way or reports "unknown" rather
// than pretend.

// within reports whether the directory p, or its deepest existing
// ancestor, is top or lies below it, comparing each ancestor with top
// (os.SameFile) up to the workspace.
func (w *workspace) within(top fs.FileInfo, p string) bool {
	for {
		if fi, err := w.root.Stat(p); err == nil && fi.IsDir() {
			break
		}
		if p == "." {
			return false
		}
		p = filepath.Dir(p)
	}
	for {
		fi, err := w.root.Stat(p)
		if err != nil {
			return false
		}
		if os.SameFile(fi, top) {
			return true
		}
		if p == "." {
			return false
		}
		p = filepath.Dir(p)
	}
}

// errNoSeekData says there is no SEEK_DATA here: copies take the plain path.
var errNoSeekData = errors.New("no SEEK_DATA on this platform")

func seekData(f *os.File, pos int64) (int64, error) { return 0, errNoSeekData }
func seekHole(f *os.File, pos int64) (int64, error) { return 0, errNoSeekData }

// readFD reads nothing: a stopped output pump ends where it is.
func readFD(fd uintptr, buf []byte) int { return 0 }

// fdLimit: there is no per-process descriptor limit to read here.
func fdLimit() uint64 { return 8192 }

// keepOwner does nothing: there are no Unix owners here.
func keepOwner(f *os.File, old fs.FileInfo) {}

// lockTemp takes no lock: the sweep then keeps temporaries it cannot tell
// are abandoned (tryLock), rather than remove a live writer's.
func lockTemp(f *os.File) (unlinked bool) { return false }

// holdLock holds nothing (lockTemp takes no lock here).
func holdLock(f *os.File) (release func()) { return func() {} }

// tryLock reports false: without a lock nothing proves a writer gone.
func tryLock(f *os.File) bool { return false }

// diskSpace is unknown here.
func diskSpace(dir string) (total, free int64) { return -1, -1 }

// openPathFD gives no descriptor: searches open through os.Root.
func openPathFD(dir string) int { return -1 }

// closePathFD is never reached (openPathFD gives none).
func closePathFD(fd int) {}

// readRaw: there are no raw descriptors to read here (pump reads through
// the file).
func readRaw(fd uintptr, buf []byte) int { return -1 }

// nonblocking: pumpRaw is Linux only.
func nonblocking(fd uintptr) bool { return false }
