package server

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

const (
	defaultMaxResults = 200
	maxSearchFile     = 32 << 20 // larger files are skipped by search
	maxMatchLine      = 500      // longer lines are cut in results
)

type searchFile struct {
	idx int
	rel string
}

type searchResult struct {
	matches []wire.Match
	binary  bool
}

func (w *workspace) search(ctx context.Context, a wire.FSSearchRequest) (any, *wire.WireError) {
	m, e := NewLineMatcher(a.Pattern, a.IgnoreCase)
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	files := make(chan searchFile, 256)
	var (
		mu      sync.Mutex
		results = map[int]searchResult{}
		total   int
		scanned int
	)
	defer widenProcs()()
	workers := max(2, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 256<<10)
			for sf := range files {
				if ctx.Err() != nil {
					continue
				}
				res, nbuf := w.searchOne(ctx, sf.rel, m, buf)
				buf = nbuf
				mu.Lock()
				scanned++
				if len(res.matches) > 0 || res.binary {
					results[sf.idx] = res
					total += len(res.matches)
				}
				mu.Unlock()
			}
		}()
	}
	idx := 0
	stopped := false
	walkErr := fs.WalkDir(w.root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == rel {
				return err
			}
			return nil
		}
		if ctx.Err() != nil {
			return fs.SkipAll
		}
		if d.IsDir() {
			if p != rel && !a.All && (d.Name() == ".git" || d.Name() == "node_modules") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), tempPrefix) {
			// A write in progress is not a file yet: its matches would
			// name a file that is about to vanish.
			return nil
		}
		if !SearchSelects(rel, p, a.Include, a.Exclude) {
			return nil
		}
		// Stop walking once enough results are certain.
		mu.Lock()
		enough := total >= limit
		mu.Unlock()
		if enough {
			// Files are left unread: there may be more matches.
			stopped = true
			return fs.SkipAll
		}
		files <- searchFile{idx: idx, rel: p}
		idx++
		return nil
	})
	close(files)
	wg.Wait()
	if walkErr != nil {
		return nil, fsError(a.Path, walkErr)
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up (its reply is dropped); the workers stopped
		// inside the file they were reading.
		return nil, wire.Errorf(wire.CodeCanceled, "search %q cancelled after %d files", a.Pattern, scanned)
	}
	keys := make([]int, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	rep := wire.FSSearchReply{Matches: []wire.Match{}, Files: scanned}
	for _, k := range keys {
		r := results[k]
		if r.binary {
			rep.SkippedBinary++
			continue
		}
		for _, m := range r.matches {
			if len(rep.Matches) >= limit {
				rep.Truncated = true
				break
			}
			rep.Matches = append(rep.Matches, m)
		}
	}
	if total > limit || stopped {
		rep.Truncated = true
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

func (w *workspace) searchOne(ctx context.Context, rel string, m *LineMatcher, buf []byte) (searchResult, []byte) {
	fd, err := w.openForSearch(rel)
	if err != nil {
		return searchResult{}, buf
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size > maxSearchFile || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return searchResult{}, buf
	}
	if need := int(st.Size) + 1; cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	data := buf[:cap(buf)]
	n := 0
	for n < len(data) {
		k, err := unix.Read(fd, data[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			break
		}
		n += k
		if int64(n) == st.Size {
			break // the whole file as stat saw it: skip the read that returns EOF
		}
	}
	data = data[:n]
	if isBinary(data) {
		found := false
		_ = m.EachLine(ctx, data, func(int, int) bool { found = true; return false })
		return searchResult{binary: found}, buf
	}
	matches, _ := m.Matches(ctx, filepath.ToSlash(rel), data)
	return searchResult{matches: matches}, buf
}

// Matches returns one Match per line of the text file data (named p in
// the results) that holds a match, with 1-based line numbers and the line
// cut to maxMatchLine bytes. On ctx's end it returns what it found so far
// and ctx's error.
func (m *LineMatcher) Matches(ctx context.Context, p string, data []byte) ([]wire.Match, error) {
	var out []wire.Match
	line, counted := 1, 0
	err := m.EachLine(ctx, data, func(start, end int) bool {
		line += bytes.Count(data[counted:start], []byte{'\n'})
		counted = start
		text := bytes.TrimSuffix(data[start:end], []byte{'\r'})
		if len(text) > maxMatchLine {
			text = text[:maxMatchLine]
			for len(text) > 0 && !utf8.Valid(text[max(0, len(text)-3):]) {
				text = text[:len(text)-1]
			}
		}
		m := wire.Match{Path: p, Line: line, Text: string(text)}
		if !utf8.ValidString(m.Text) {
			m.Text, m.InvalidUTF8 = strings.ToValidUTF8(m.Text, "\uFFFD"), true
		}
		out = append(out, m)
		return true
	})
	return out, err
}
