package server

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"regexp/syntax"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/internal/grep"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

const (
	defaultMaxResults = 200
	maxSearchFile     = 32 << 20 // larger files are skipped by search
	maxMatchLine      = 500      // longer lines are cut in results
)

// search serves fs.search with the search engine (internal/grep) over the
// workspace (searchFS): the engine walks and matches, the workspace
// confines every path it opens.
func (w *workspace) search(ctx context.Context, a wire.FSSearchRequest) (any, *wire.WireError) {
	m, e := compilePattern(a.Pattern, a.IgnoreCase)
	if e != nil {
		return nil, e
	}
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	for _, g := range append(append([]string{}, a.Include...), a.Exclude...) {
		if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
			return nil, wire.Errorf(wire.CodeInvalidArgument, "bad glob %q: %v", g, err)
		}
	}
	limit := a.MaxResults
	if limit <= 0 {
		limit = defaultMaxResults
	}
	// The engine starts one worker per P: searching is the one thing the
	// agent does that needs more than one (see NarrowProcs).
	defer widenProcs()()
	res, err := grep.Search(ctx, searchFS{w}, rel, m, grep.Options{
		MaxResults:   limit,
		MaxFileSize:  maxSearchFile,
		MaxLineBytes: maxMatchLine,
		SkipDir: func(p string, d fs.DirEntry) bool {
			return !a.All && (d.Name() == ".git" || d.Name() == "node_modules")
		},
		Select: func(p, name string) bool {
			// A write in progress is not a file yet: its matches would
			// name a file that is about to vanish.
			return !strings.HasPrefix(name, tempPrefix) && SearchSelects(rel, p, a.Include, a.Exclude)
		},
	})
	if ctx.Err() != nil {
		// The caller gave up (its reply is dropped); the workers stopped
		// inside the file they were reading.
		scanned := 0
		if res != nil {
			scanned = res.Files
		}
		return nil, wire.Errorf(wire.CodeCanceled, "search %q cancelled after %d files", a.Pattern, scanned)
	}
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	rep := wire.FSSearchReply{Matches: make([]wire.Match, len(res.Matches)), Files: res.Files, SkippedBinary: res.SkippedBinary, Truncated: res.Truncated}
	for i, mt := range res.Matches {
		rep.Matches[i] = wire.Match{Path: mt.Path, Line: mt.Line, Text: mt.Text, InvalidUTF8: mt.InvalidUTF8}
	}
	return rep, nil
}

// SearchSelects reports whether a search rooted at root (relative to the
// workspace) reads the file p (also relative to the workspace): its path
// below root — its base name when it is the root itself — must match one of
// the include globs, when there are any, and none of the exclude globs.
// Exported so that the fake backend selects exactly the files the agent does.
func SearchSelects(root, p string, include, exclude []string) bool {
	sub := p
	if root != "." {
		sub = strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		if sub == "" {
			sub = path.Base(p)
		}
	}
	if len(include) > 0 && !anyGlob(include, sub) {
		return false
	}
	return !anyGlob(exclude, sub)
}

func anyGlob(globs []string, rel string) bool {
	for _, g := range globs {
		if GlobMatch(g, rel) {
			return true
		}
	}
	return false
}

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
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return f.ReadDir(-1)
}

// fdFile is a file opened for search: a bare descriptor, read with one
// system call per Read.
type fdFile int

func (f fdFile) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(f), p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f fdFile) Close() error { return unix.Close(int(f)) }

func (f fdFile) Stat() (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f), &st); err != nil {
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
	return unix.Dup(int(f.Fd()))
}

// compilePattern compiles a search pattern with the engine, as an
// INVALID_ARGUMENT error that says what to change when it is refused.
func compilePattern(pattern string, ignoreCase bool) (*grep.Matcher, *wire.WireError) {
	if pattern == "" {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "search pattern is empty")
	}
	m, err := grep.Compile(pattern, ignoreCase)
	var se *syntax.Error
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, grep.ErrNeedsNewline):
		return nil, wire.Errorf(wire.CodeInvalidArgument, "pattern %q needs a newline (\\n) to match, but search matches within one line: use $ to match at the end of a line, or search for each line's part separately", pattern)
	case errors.As(err, &se):
		return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %s (RE2 syntax: escape literal characters like ( [ . with a backslash)", pattern, se.Code)
	}
	return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %v", pattern, err)
}
