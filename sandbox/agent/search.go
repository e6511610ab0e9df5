package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"
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
	matches []Match
	binary  bool
}

func (w *workspace) search(ctx context.Context, a FSSearchRequest) (any, *WireError) {
	if a.Pattern == "" {
		return nil, errorf(CodeInvalidArgument, "search pattern is empty")
	}
	expr := a.Pattern
	if a.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile("(?m)" + expr)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			return nil, errorf(CodeInvalidArgument, "bad regular expression %q: %s (RE2 syntax: escape literal characters like ( [ . with a backslash)", a.Pattern, se.Code)
		}
		return nil, errorf(CodeInvalidArgument, "bad regular expression %q: %v", a.Pattern, err)
	}
	// A pure literal is found with bytes.Index, far faster than the
	// regexp engine; the regexp still confirms and locates each line.
	m, err := newMatcher(a.Pattern, re, a.IgnoreCase)
	if err != nil {
		return nil, errorf(CodeInvalidArgument, "bad regular expression %q: %v", a.Pattern, err)
	}
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	for _, g := range append(append([]string{}, a.Include...), a.Exclude...) {
		if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
			return nil, errorf(CodeInvalidArgument, "bad glob %q: %v", g, err)
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
				res, nbuf := w.searchOne(sf.rel, m, buf)
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
		if !d.Type().IsRegular() {
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
	keys := make([]int, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	rep := FSSearchReply{Matches: []Match{}, Files: scanned}
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

// matcher finds a search pattern's matches in a file. When the pattern
// starts with a literal (as most searches do: "func New", "TODO(",
// "import "), a match can only start where that literal occurs: the
// literal is found with bytes.Index (vectorised) and the regular
// expression runs, anchored, only there, instead of over every byte of
// every file.
type matcher struct {
	re       *regexp.Regexp // (?m)pattern
	prefix   []byte         // literal every match starts with, nil if none
	complete bool           // the pattern is exactly prefix
	anchored *regexp.Regexp // (?m)\A(?:pattern), tried at each prefix
}

func newMatcher(pattern string, re *regexp.Regexp, ignoreCase bool) (*matcher, error) {
	m := &matcher{re: re}
	if ignoreCase {
		return m, nil
	}
	lit, complete := re.LiteralPrefix()
	if lit == "" {
		return m, nil
	}
	m.prefix, m.complete = []byte(lit), complete
	if !complete {
		// The pattern begins with literal characters, so no empty-width
		// assertion looks at the text before a match: running it anchored
		// on data[i:] finds exactly the match the unanchored search finds
		// at i.
		a, err := regexp.Compile(`(?m)\A(?:` + pattern + `)`)
		if err != nil {
			return nil, err
		}
		m.anchored = a
	}
	return m, nil
}

// contains reports whether data has a match at all.
func (m *matcher) contains(data []byte) bool {
	if m.prefix == nil {
		return m.re.Match(data)
	}
	if m.complete {
		return bytes.Contains(data, m.prefix)
	}
	return len(m.findAll(data, 1)) > 0
}

// findAll returns the [start, end) of successive non-overlapping matches,
// as regexp's FindAllIndex does, at most n of them (n < 0: all).
func (m *matcher) findAll(data []byte, n int) [][]int {
	if m.prefix == nil {
		return m.re.FindAllIndex(data, n)
	}
	var out [][]int
	pos := 0
	for n < 0 || len(out) < n {
		i := bytes.Index(data[pos:], m.prefix)
		if i < 0 {
			break
		}
		i += pos
		end := i + len(m.prefix)
		if !m.complete {
			loc := m.anchored.FindIndex(data[i:])
			if loc == nil {
				pos = i + 1
				continue
			}
			end = i + loc[1]
		}
		out = append(out, []int{i, end})
		pos = end
	}
	return out
}

// openForSearch opens a file below the workspace for reading. openat2 with
// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS confines the whole path in one
// system call (os.Root walks it one component at a time, several calls per
// file, which dominates a search over many small files). Where openat2 is
// missing, or the path goes through a symbolic link, it falls back to
// os.Root.
func (w *workspace) openForSearch(rel string) (int, error) {
	if w.rootFD >= 0 {
		fd, err := unix.Openat2(w.rootFD, rel, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
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

func (w *workspace) searchOne(rel string, m *matcher, buf []byte) (searchResult, []byte) {
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
		if m.contains(data) {
			return searchResult{binary: true}, buf
		}
		return searchResult{}, buf
	}
	locs := m.findAll(data, -1)
	if len(locs) == 0 {
		return searchResult{}, buf
	}
	var res searchResult
	line, pos := 1, 0
	lastLine := -1
	for _, loc := range locs {
		line += bytes.Count(data[pos:loc[0]], []byte{'\n'})
		pos = loc[0]
		if line == lastLine {
			continue
		}
		lastLine = line
		start := bytes.LastIndexByte(data[:loc[0]], '\n') + 1
		end := bytes.IndexByte(data[loc[0]:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += loc[0]
		}
		text := data[start:end]
		text = bytes.TrimSuffix(text, []byte{'\r'})
		if len(text) > maxMatchLine {
			text = text[:maxMatchLine]
			for len(text) > 0 && !utf8.Valid(text[len(text)-3:]) {
				text = text[:len(text)-1]
			}
		}
		res.matches = append(res.matches, Match{Path: filepath.ToSlash(rel), Line: line, Text: strings.ToValidUTF8(string(text), "\uFFFD")})
	}
	return res, buf
}

// inputReader adapts a request's inbound data frames to an io.Reader.
type inputReader struct {
	r   *request
	buf []byte
}

func (ir *inputReader) Read(p []byte) (int, error) {
	for len(ir.buf) == 0 {
		b, ok := ir.r.readInput()
		if !ok {
			if ir.r.ctx.Err() != nil {
				return 0, context.Canceled
			}
			return 0, io.EOF
		}
		ir.buf = b
	}
	n := copy(p, ir.buf)
	ir.buf = ir.buf[n:]
	return n, nil
}

// copyIn extracts a tar stream into dir. Entry names are confined like
// every other path: absolute names and ".." are refused, and os.Root
// refuses links that would lead outside.
func (w *workspace) copyIn(r *request, dir string) (any, *WireError) {
	base, e := w.rel(dir)
	if e != nil {
		return nil, e
	}
	if err := w.root.MkdirAll(base, 0o755); err != nil {
		return nil, fsError(dir, err)
	}
	used := int64(-1)
	if w.disk > 0 {
		used = w.usage()
	}
	tr := tar.NewReader(&inputReader{r: r})
	var rep FSCopyReply
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return rep, nil
		}
		if err != nil {
			return nil, errorf(CodeInvalidArgument, "reading the tar stream: %v", err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || !utf8.ValidString(name) {
			return nil, errorf(CodePathEscape, "tar entry %q leads outside the destination", h.Name)
		}
		target := filepath.Join(base, name)
		if dir := filepath.Dir(target); dir != "." {
			if err := w.root.MkdirAll(dir, 0o755); err != nil {
				return nil, fsError(target, err)
			}
		}
		mode := fs.FileMode(h.Mode) & 0o777
		switch h.Typeflag {
		case tar.TypeDir:
			if err := w.root.MkdirAll(target, 0o755); err != nil {
				return nil, fsError(target, err)
			}
		case tar.TypeReg:
			if w.fsize > 0 && h.Size > w.fsize {
				return nil, errorf(CodeQuota, "tar entry %q is %d bytes, over the %d byte file size limit", h.Name, h.Size, w.fsize)
			}
			if used >= 0 && used+h.Size > w.disk {
				return nil, errorf(CodeQuota, "tar entry %q would pass the workspace quota of %d bytes", h.Name, w.disk)
			}
			f, _, e := w.openFile(target, target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode|0o200)
			if e != nil {
				return nil, e
			}
			n, err := io.Copy(f, tr)
			_ = f.Chmod(mode)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, fsError(target, err)
			}
			if used >= 0 {
				used += n
			}
			rep.Files++
			rep.Bytes += n
		case tar.TypeSymlink:
			_ = w.root.Remove(target)
			if err := w.root.Symlink(h.Linkname, target); err != nil {
				return nil, fsError(target, err)
			}
		case tar.TypeLink:
			old := filepath.Clean(h.Linkname)
			if filepath.IsAbs(old) || old == ".." || strings.HasPrefix(old, "../") {
				return nil, errorf(CodePathEscape, "tar hard link %q -> %q leads outside the destination", h.Name, h.Linkname)
			}
			if err := w.root.Link(filepath.Join(base, old), target); err != nil {
				return nil, fsError(target, err)
			}
		default:
			// Devices, fifos and the like are skipped: they have no place in a workspace.
		}
	}
}

// tarWriter streams tar output as data frames.
type frameWriter struct{ r *request }

func (fw frameWriter) Write(p []byte) (int, error) {
	if !fw.r.sendData(FrameStdout, p) {
		return 0, context.Canceled
	}
	return len(p), nil
}

func (w *workspace) copyOut(r *request, p string) (any, *WireError) {
	rel, e := w.rel(p)
	if e != nil {
		return nil, e
	}
	fi, err := w.root.Stat(rel)
	if err != nil {
		return nil, fsError(p, err)
	}
	tw := tar.NewWriter(frameWriter{r: r})
	var rep FSCopyReply
	add := func(name, src string, info fs.FileInfo) error {
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(name)
		h.Uname, h.Gname = "", ""
		if info.Mode()&fs.ModeSymlink != 0 {
			h.Linkname, _ = w.root.Readlink(src)
		}
		if info.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, _, e := w.openFile(src, src, os.O_RDONLY, 0)
			if e != nil {
				return e
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
			rep.Files++
			rep.Bytes += n
		}
		return nil
	}
	if !fi.IsDir() {
		if err := add(path.Base(filepath.ToSlash(rel)), rel, fi); err != nil {
			return nil, fsError(p, err)
		}
	} else {
		walkErr := fs.WalkDir(w.root.FS(), rel, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if q == rel {
				return nil
			}
			info, err := w.root.Lstat(q)
			if err != nil {
				return err
			}
			name := strings.TrimPrefix(strings.TrimPrefix(q, rel), "/")
			if rel == "." {
				name = q
			}
			return add(name, q, info)
		})
		if walkErr != nil {
			return nil, fsError(p, walkErr)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fsError(p, err)
	}
	return rep, nil
}
