//go:build unix

package server

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// The workspace's Unix system calls (Linux and macOS), named here so that
// the files that use them build on Windows too (sys_windows.go).

// within reports whether the directory p (symbolic links followed, as the
// operations follow them), or its deepest existing ancestor, is top or lies
// below it. It compares inodes walking up through "..", so a link leading
// back into top is caught where a lexical prefix check would miss it.
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
	rootInfo, err := w.root.Stat(".")
	if err != nil {
		return false
	}
	// O_DIRECTORY: p was a directory a moment ago; if something swapped
	// in a FIFO since, the open fails instead of waiting for a writer.
	f, err := w.root.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	want, ok := top.Sys().(*syscall.Stat_t)
	stop, ok2 := rootInfo.Sys().(*syscall.Stat_t)
	if !ok || !ok2 {
		return false
	}
	fd, err := unix.Openat(int(f.Fd()), ".", oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	// Bounded: a path has at most PATH_MAX/2 components.
	for range 4096 {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			break
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			unix.Close(fd)
			return true
		}
		if st.Dev == stop.Dev && st.Ino == stop.Ino {
			break
		}
		up, err := unix.Openat(fd, "..", oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return false
		}
		fd = up
	}
	unix.Close(fd)
	return false
}

// seekData and seekHole find the next data and hole of a sparse file, so a
// copy skips holes (ENXIO: no data after pos).
func seekData(f *os.File, pos int64) (int64, error) { return f.Seek(pos, unix.SEEK_DATA) }
func seekHole(f *os.File, pos int64) (int64, error) { return f.Seek(pos, unix.SEEK_HOLE) }

// readFD reads what descriptor fd holds now into buf (it is non-blocking)
// and returns how many bytes it read, 0 or less for none.
func readFD(fd uintptr, buf []byte) int {
	n, _ := unix.Read(int(fd), buf)
	return n
}

// fdLimit is the agent's descriptor limit (RLIMIT_NOFILE's soft limit).
func fdLimit() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1 << 20
	}
	return lim.Cur
}

// keepOwner gives the replacement f of the file old old's owner, where the
// agent may set it (as root); otherwise it belongs to the agent, as a file
// a command rewrites with mv would.
func keepOwner(f *os.File, old fs.FileInfo) {
	if st, ok := old.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
		_ = f.Chown(int(st.Uid), int(st.Gid))
	}
}

// lockTemp locks the new temporary file f (the lock says "a writer is
// alive" to sweepTemps) and reports whether a sweep unlinked it before the
// lock was taken (then the caller starts over with a new name).
func lockTemp(f *os.File) (unlinked bool) {
	fd := int(f.Fd())
	if unix.Flock(fd, unix.LOCK_EX) == nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Nlink == 0 {
			return true
		}
	}
	return false
}

// holdLock keeps f's lock (lockTemp) past f's Close, through a duplicate
// descriptor, until the returned release runs.
func holdLock(f *os.File) (release func()) {
	hold, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return func() {}
	}
	return func() { _ = unix.Close(hold) }
}

// tryLock takes f's lock without waiting; false means a live writer holds
// it.
func tryLock(f *os.File) bool { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil }

// diskSpace returns the size and the free bytes of the file system holding
// dir, -1 each if unknown.
func diskSpace(dir string) (total, free int64) {
	var sfs unix.Statfs_t
	if unix.Statfs(dir, &sfs) != nil {
		return -1, -1
	}
	return int64(sfs.Blocks) * int64(sfs.Bsize), int64(sfs.Bavail) * int64(sfs.Bsize) // Bsize is uint32 on darwin
}

// closePathFD closes a descriptor from openPathFD.
func closePathFD(fd int) { _ = unix.Close(fd) }
