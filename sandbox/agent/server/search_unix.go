//go:build unix

package server

import (
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// searchFS is the workspace as the search engine reads it (fs.ReadDirFS,
// fs.StatFS). Files and directories are opened beneath the workspace root
// by openForSearch and read through their descriptors, with no lstat per
// directory entry (a directory listed through os.Root stats every entry:
// 11,478 extra system calls over the Go tree, 13% of a search's CPU).
type searchFS struct{ w *workspace }

func (s searchFS) Open(name string) (fs.File, error) {
	fd, err := s.w.openForSearch(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return fdFile(fd), nil
}

// Stat follows a symbolic link at name (inside the workspace, as os.Root
// does): a search started at a linked folder searches it.
func (s searchFS) Stat(name string) (fs.FileInfo, error) { return s.w.root.Stat(name) }

func (s searchFS) ReadDir(name string) ([]fs.DirEntry, error) {
	fd, err := s.w.openForSearch(name)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	ents, err := readDirFD(s.w, fd, name)
	if err != nil {
		return ents, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return ents, nil
}

// fdFile is a file opened for search: a bare descriptor, read with one
// system call per Read (on Linux a raw one, see search_linux.go).
type fdFile int

func (f fdFile) Read(p []byte) (int, error) {
	for {
		n, err := searchRead(int(f), p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n < len(p) {
			// A regular file's read returns less than it was asked for
			// only at the end of the file (and the walk opens only
			// regular files); saying so with these bytes spares the
			// engine a read that returns nothing (grep's readFile). The
			// exception is a FUSE file system mounted direct_io whose
			// server answers short reads before the end, against FUSE's
			// own rule: the rest of such a file is not searched.
			return n, io.EOF
		}
		return n, nil
	}
}

func (f fdFile) Close() error { return searchClose(int(f)) }

func (f fdFile) Stat() (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := searchFstat(int(f), &st); err != nil {
		return nil, err
	}
	return fdInfo{size: st.Size, mode: uint32(st.Mode)}, nil
}

// fdInfo is a searched file's fs.FileInfo: the engine asks for its type
// and size only.
type fdInfo struct {
	size int64
	mode uint32
}

func (i fdInfo) Name() string { return "" }
func (i fdInfo) Size() int64  { return i.size }
func (i fdInfo) Mode() fs.FileMode {
	m := fs.FileMode(i.mode & 0o777)
	switch i.mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		m |= fs.ModeDir
	default:
		m |= fs.ModeIrregular
	}
	return m
}
func (i fdInfo) ModTime() time.Time { return time.Time{} }
func (i fdInfo) IsDir() bool        { return i.mode&unix.S_IFMT == unix.S_IFDIR }
func (i fdInfo) Sys() any           { return nil }

// openForSearch opens a file below the workspace for reading. openat2 with
// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS confines the whole path in one
// system call (os.Root walks it one component at a time, several calls per
// file, which dominates a search over many small files). Where openat2 is
// missing, or the path goes through a symbolic link, it falls back to
// os.Root.
func (w *workspace) openForSearch(rel string) (int, error) {
	if w.rootFD >= 0 {
		fd, err := openBeneath(w.rootFD, rel)
		// Fall back where openat2 is missing or refused (ENOSYS, EPERM
		// under seccomp), and where the path has a symbolic link in it
		// (ELOOP; EXDEV if it leads out, which os.Root then judges) or
		// resolution raced a rename (EAGAIN): a link inside the workspace
		// is followed like everywhere else.
		switch err {
		case unix.ENOSYS, unix.EPERM, unix.ELOOP, unix.EXDEV, unix.EAGAIN:
		default:
			return fd, err
		}
	}
	f, err := w.root.OpenFile(rel, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	// Close-on-exec, as every descriptor the agent opens: a plain dup
	// would be inherited by a command started while the search runs.
	return searchDup(int(f.Fd()))
}
