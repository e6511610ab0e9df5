package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// workspace confines file requests to one directory with os.Root, whose
// kernel-level openat walk refuses "..", absolute paths, and symlinks
// (including ones swapped in during a request) that lead outside.
type workspace struct {
	dir    string // the workspace as requests and processes name it
	host   string // the directory opened as root (dir, unless ServeOptions.WorkspaceDir)
	root   *os.Root
	rootFD int // O_PATH descriptor of host for openat2 (search), -1 if none
	fsize  int64
	disk   int64
	// The sweep of temporary files left by dead writers runs in the
	// background from the start; close stops it and waits.
	sweepStop, sweepDone chan struct{}
}

func openWorkspace(h wire.Hello) (*workspace, error) { return openWorkspaceAt(h, "") }

// openWorkspaceAt opens host as the workspace that requests name
// h.Workspace (ServeOptions.WorkspaceDir); host "" is h.Workspace itself.
func openWorkspaceAt(h wire.Hello, host string) (*workspace, error) {
	dir := filepath.Clean(h.Workspace)
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("workspace %q is not an absolute path", h.Workspace)
	}
	if host == "" {
		host = dir
	}
	root, err := os.OpenRoot(host)
	if err != nil {
		return nil, err
	}
	rootFD := openPathFD(host)
	w := &workspace{dir: dir, host: host, root: root, rootFD: rootFD, fsize: h.FileSizeBytes, disk: h.DiskBytes,
		sweepStop: make(chan struct{}), sweepDone: make(chan struct{})}
	go func() {
		defer close(w.sweepDone)
		w.sweepTemps(w.sweepStop)
	}()
	return w, nil
}

func (w *workspace) close() {
	close(w.sweepStop)
	<-w.sweepDone
	w.root.Close()
	if w.rootFD >= 0 {
		closePathFD(w.rootFD)
	}
}

// rel turns a request path (relative to the workspace, or absolute under
// it) into a clean path relative to the root. It is a lexical check with a
// good message; os.Root does the real confinement.
func (w *workspace) rel(p string) (string, *wire.WireError) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", wire.Errorf(wire.CodeInvalidArgument, "path %q contains a NUL byte", p)
	}
	if !utf8.ValidString(p) {
		return "", wire.Errorf(wire.CodeInvalidArgument, "path %q is not valid UTF-8", p)
	}
	if p == "" {
		return ".", nil
	}
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		if c == w.dir {
			return ".", nil
		}
		if !strings.HasPrefix(c, w.dir+"/") {
			return "", wire.Errorf(wire.CodePathEscape, "path %q is outside the workspace: use a path relative to the workspace or under %s", p, w.dir)
		}
		return c[len(w.dir)+1:], nil
	}
	c := filepath.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", wire.Errorf(wire.CodePathEscape, "path %q leads outside the workspace (%s): remove the \"..\" components", p, w.dir)
	}
	return c, nil
}

// fsError maps an OS error to a coded wire error.
func fsError(p string, err error) *wire.WireError {
	var werr *wire.WireError
	if errors.As(err, &werr) {
		return werr
	}
	msg := err.Error()
	var errno syscall.Errno
	errors.As(err, &errno)
	p = shortName(p)
	switch {
	case errno == syscall.ENAMETOOLONG:
		return wire.Errorf(wire.CodeInvalidArgument, "path %q is too long: a file or directory name may have at most 255 bytes, a path 4095", p)
	case strings.Contains(msg, "path escapes from parent"):
		return wire.Errorf(wire.CodePathEscape, "path %q resolves outside the workspace (through \"..\" or a symbolic link): access denied", p)
	case errors.Is(err, fs.ErrNotExist):
		return wire.Errorf(wire.CodeNotFound, "%q does not exist", p)
	case errno == syscall.ENOTEMPTY:
		// Checked before fs.ErrExist, which ENOTEMPTY also matches.
		return wire.Errorf(wire.CodeInvalidArgument, "directory %q is not empty: pass recursive to remove it with its contents", p)
	case errors.Is(err, fs.ErrExist):
		return wire.Errorf(wire.CodeExists, "%q already exists", p)
	case errno == syscall.ENOSPC || errno == syscall.EDQUOT:
		// Writes map it with workspace.writeError, which can tell the
		// sandbox's quota from a full file system.
		return wire.Errorf(wire.CodeNoSpace, "no space left on the file system holding the workspace (%q): delete files", p)
	case errno == syscall.EFBIG:
		return wire.Errorf(wire.CodeQuota, "%q would exceed the maximum file size", p)
	case errno == syscall.ENOTDIR:
		return wire.Errorf(wire.CodeNotDir, "a component of %q is not a directory", p)
	case errno == syscall.EISDIR:
		return wire.Errorf(wire.CodeIsDir, "%q is a directory", p)
	case errno == syscall.ELOOP:
		return wire.Errorf(wire.CodePathEscape, "%q is a symbolic link loop or a link that cannot be followed safely", p)
	case errors.Is(err, fs.ErrPermission) || errno == syscall.EROFS:
		return wire.Errorf(wire.CodePermission, "permission denied for %q", p)
	}
	return wire.Errorf(wire.CodeInternal, "%s: %v", p, shortName(msg))
}

// shortName cuts a path for a message in the middle when it is long: an
// error about a 5,000-byte name must not be 10 KB long.
func shortName(p string) string {
	const keep = 60
	if len(p) <= 2*keep {
		return p
	}
	head, tail := p[:keep], p[len(p)-keep:]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return head + "…" + tail
}

const defaultMaxRead = 8 << 20

// maxReadBytes caps FSReadRequest.MaxBytes: the contents travel in one
// Blob frame, which cannot exceed MaxPayload.
const maxReadBytes = wire.MaxPayload - 64<<10

// isBinary uses git's heuristic: a NUL byte in the first 8000 bytes.
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}

func (w *workspace) read(a wire.FSReadRequest) (any, *wire.WireError) {
	res, _, e := w.readUpTo(a, -1)
	return res, e
}

// readUpTo is read, except that it gives up before reading (done is false)
// when the file is larger than limit bytes (limit < 0: no limit).
func (w *workspace) readUpTo(a wire.FSReadRequest, limit int64) (res any, done bool, e *wire.WireError) {
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, true, e
	}
	max := readMax(a)
	if limit >= 0 {
		// A small regular file without a symbolic link on its path is
		// read with raw system calls (readSmallRaw says why); anything
		// else, including every error, goes the ordinary way below. A
		// whole-file read over max is refused below, so it is not read
		// here.
		rawLimit := limit
		if wholeFile(a) {
			rawLimit = min(limit, max)
		}
		if data, size, ok := w.readSmallRaw(rel, rawLimit); ok {
			if wholeFile(a) {
				return wholeReply(data, size, max), true, nil
			}
			return linesReply(a, data, size, max), true, nil
		}
	}
	// O_NONBLOCK: opening a FIFO a command made must not hang the request
	// (it is refused below as not a regular file); reads of regular files
	// ignore the flag.
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, true, fsError(a.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, true, fsError(a.Path, err)
	}
	if limit >= 0 && fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, false, nil
	}
	res, e = readOpen(f, fi, a)
	return res, true, e
}

// wholeFile reports whether a asks for the whole file (no range of lines).
func wholeFile(a wire.FSReadRequest) bool { return a.Limit <= 0 && a.Offset <= 0 }

// readMax is the most bytes a read returns.
func readMax(a wire.FSReadRequest) int64 {
	max := a.MaxBytes
	if max <= 0 {
		max = defaultMaxRead
	}
	return min(max, maxReadBytes)
}

func readOpen(f *os.File, fi fs.FileInfo, a wire.FSReadRequest) (any, *wire.WireError) {
	if fi.IsDir() {
		return nil, wire.Errorf(wire.CodeIsDir, "%q is a directory: list it instead of reading it", a.Path)
	}
	if !fi.Mode().IsRegular() {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "%q is not a regular file", a.Path)
	}
	max := readMax(a)
	if wholeFile(a) {
		if fi.Size() > max {
			return nil, wire.Errorf(wire.CodeTooLarge, "%q is %d bytes, over the %d byte read limit: read a range of lines (offset/limit) or copy it out", a.Path, fi.Size(), max)
		}
		buf := make([]byte, fi.Size()+1)
		n, err := readFull(f, buf)
		if err != nil {
			return nil, fsError(a.Path, err)
		}
		return wholeReply(buf[:n], fi.Size(), max), nil
	}
	// Line mode: stream through the file without holding more than the
	// requested lines.
	data, err := readAllLimit(f, 64<<20)
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	return linesReply(a, data, fi.Size(), max), nil
}

// wholeReply is the reply to a whole-file read of a file of size bytes
// whose contents were data (one byte more than size when it grew).
func wholeReply(data []byte, size, max int64) wire.FSReadReply {
	rep := wire.FSReadReply{Size: size}
	if int64(len(data)) > max {
		data = data[:max]
		rep.Truncated = true
	}
	rep.Data = data
	rep.Binary = isBinary(rep.Data)
	return rep
}

// linesReply is the reply to a read of a range of lines from data, the
// contents of a file of size bytes.
func linesReply(a wire.FSReadRequest, data []byte, size, max int64) wire.FSReadReply {
	rep := wire.FSReadReply{Size: size}
	if isBinary(data) {
		rep.Binary = true
		return rep
	}
	line := 0
	start := 0
	var out []byte
	for start < len(data) {
		end := bytes.IndexByte(data[start:], '\n')
		next := len(data)
		if end >= 0 {
			next = start + end + 1
		}
		if line >= a.Offset {
			if a.Limit > 0 && rep.Lines >= a.Limit {
				rep.More = true
				break
			}
			if int64(len(out)+next-start) > max {
				rep.Truncated = true
				rep.More = true
				break
			}
			out = append(out, data[start:next]...)
			rep.Lines++
		}
		line++
		start = next
	}
	rep.Data = out
	return rep
}

func readFull(f *os.File, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			if err.Error() == "EOF" {
				return n, nil
			}
			return n, err
		}
		if m == 0 {
			break
		}
	}
	return n, nil
}

func readAllLimit(f *os.File, limit int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for len(out) < limit {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return out, err
		}
	}
	return out[:limit], nil
}

// openFile opens rel for the agent's own reading or writing and refuses
// anything but a regular file. Every such open goes through here: a
// blocking open of a FIFO a command made waits for a peer that may never
// come, and with it the request, and at the end the agent's shutdown.
// O_NONBLOCK makes that open return at once (a write-only one fails with
// ENXIO when nobody reads); reads and writes of regular files ignore it.
func (w *workspace) openFile(rel, shown string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, *wire.WireError) {
	f, err := w.root.OpenFile(rel, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			return nil, nil, wire.Errorf(wire.CodeInvalidArgument, "%q is not a regular file", shown)
		}
		return nil, nil, fsError(shown, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fsError(shown, err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, wire.Errorf(wire.CodeIsDir, "%q is a directory", shown)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, wire.Errorf(wire.CodeInvalidArgument, "%q is not a regular file", shown)
	}
	return f, fi, nil
}

// readFile reads the whole regular file rel, refusing one over max bytes
// (max < 0: no cap).
func (w *workspace) readFile(rel, shown string, max int64) ([]byte, *wire.WireError) {
	f, fi, e := w.openFile(rel, shown, os.O_RDONLY, 0)
	if e != nil {
		return nil, e
	}
	defer f.Close()
	if max >= 0 && fi.Size() > max {
		return nil, wire.Errorf(wire.CodeTooLarge, "%q is %d bytes, over the %d byte limit", shown, fi.Size(), max)
	}
	// Room for one byte more than the size, so that the end is seen
	// without a second read; a file that grows is read on, to the cap.
	buf := make([]byte, 0, fi.Size()+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if max >= 0 && int64(len(buf)) > max {
			return nil, wire.Errorf(wire.CodeTooLarge, "%q grew past the %d byte limit while it was read", shown, max)
		}
		if err == io.EOF || (err == nil && m == 0) {
			return buf, nil
		}
		if err != nil {
			return nil, fsError(shown, err)
		}
	}
}

// maxEditBytes caps the file fs.edit rewrites in memory.
const maxEditBytes = 64 << 20

// usage sums the sizes of regular files in the workspace.
func (w *workspace) usage() int64 {
	var total int64
	_ = fs.WalkDir(w.root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}

// checkQuota refuses a write that would pass the file-size or disk limit.
func (w *workspace) checkQuota(p string, newSize, oldSize int64) *wire.WireError {
	if w.fsize > 0 && newSize > w.fsize {
		return wire.Errorf(wire.CodeQuota, "writing %q would make it %d bytes, over the %d byte file size limit", p, newSize, w.fsize)
	}
	if w.disk > 0 {
		if used := w.usage(); used-oldSize+newSize > w.disk {
			return wire.Errorf(wire.CodeQuota, "writing %q (%d bytes) would pass the workspace quota of %d bytes (%d in use): delete files first", p, newSize, w.disk, used)
		}
	}
	return nil
}

func (w *workspace) write(a wire.FSWriteRequest) (any, *wire.WireError) {
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	if rel == "." {
		return nil, wire.Errorf(wire.CodeIsDir, "%q is the workspace directory: give a file name", a.Path)
	}
	target, e := w.resolveLinks(rel, a.Path)
	if e != nil {
		return nil, e
	}
	mode := fs.FileMode(a.Mode) & 0o777
	var oldSize int64
	exists := false
	if fi, err := w.root.Lstat(target); err == nil {
		if fi.IsDir() {
			return nil, wire.Errorf(wire.CodeIsDir, "%q is a directory", a.Path)
		}
		exists, oldSize = true, fi.Size()
		if mode == 0 {
			mode = fi.Mode().Perm()
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fsError(a.Path, err)
	}
	if mode == 0 {
		mode = 0o644
	}
	newSize := int64(len(a.Data))
	if a.Append {
		newSize += oldSize
	}
	if qe := w.checkQuota(a.Path, newSize, oldSize); qe != nil {
		return nil, qe
	}
	if a.Append && exists {
		if e := w.appendFile(target, a.Path, a.Data); e != nil {
			return nil, e
		}
	} else if e := w.replaceFile(target, a.Path, mode, func(f *os.File) error {
		_, err := f.Write(a.Data)
		return err
	}); e != nil {
		return nil, e
	}
	return wire.Entry{Path: rel, Type: "file", Size: newSize, Mode: uint32(mode)}, nil
}

// appendFile adds data at the end of the existing file rel. An append is
// not a replacement (a log must not be copied for each line): it writes in
// place, and a write that fails part way (a full disk) is cut off again,
// so that the file is left as it was.
func (w *workspace) appendFile(rel, shown string, data []byte) *wire.WireError {
	f, fi, e := w.openFile(rel, shown, os.O_WRONLY|os.O_APPEND, 0)
	if e != nil {
		return e
	}
	_, err := f.Write(data)
	if err != nil {
		// O_APPEND wrote at the end as it was when the write began; a
		// concurrent appender could have moved it, so the cut goes back
		// only to the size before this write when nothing else grew it.
		if cur, serr := f.Stat(); serr == nil && cur.Size() <= fi.Size()+int64(len(data)) {
			_ = f.Truncate(fi.Size())
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return w.writeError(shown, err, true)
	}
	return nil
}

func (w *workspace) edit(a wire.FSEditRequest) (any, *wire.WireError) {
	if a.Old == "" {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "old text is empty: give the exact text to replace (use write to create a file)")
	}
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	data, e := w.readFile(rel, a.Path, maxEditBytes)
	if e != nil {
		return nil, e
	}
	if isBinary(data) {
		return nil, wire.Errorf(wire.CodeBinary, "%q is a binary file: it cannot be edited as text", a.Path)
	}
	n := strings.Count(string(data), a.Old)
	switch {
	case n == 0:
		return nil, wire.Errorf(wire.CodeNoMatch, "the old text was not found in %q: read the file and copy the exact text, including whitespace and indentation", a.Path)
	case n > 1 && !a.ReplaceAll:
		var lines []string
		s := string(data)
		off := 0
		for range min(n, 10) {
			i := strings.Index(s[off:], a.Old)
			lines = append(lines, strconv.Itoa(strings.Count(s[:off+i], "\n")+1))
			off += i + len(a.Old)
		}
		return nil, wire.Errorf(wire.CodeAmbiguous, "the old text occurs %d times in %q (lines %s): include more surrounding text to make it unique, or set replace_all", n, a.Path, strings.Join(lines, ", "))
	}
	out := strings.Replace(string(data), a.Old, a.New, -1)
	if !a.ReplaceAll {
		out = strings.Replace(string(data), a.Old, a.New, 1)
		n = 1
	}
	if _, we := w.write(wire.FSWriteRequest{Path: a.Path, Data: []byte(out)}); we != nil {
		return nil, we
	}
	return wire.FSEditReply{Replacements: n}, nil
}

func entryOf(rel string, fi fs.FileInfo) wire.Entry {
	e := wire.Entry{Path: filepath.ToSlash(rel), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime().UnixNano()}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "dir"
		e.Size = 0
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
	default:
		e.Type = "other"
	}
	return e
}

func (w *workspace) stat(p string) (any, *wire.WireError) {
	rel, e := w.rel(p)
	if e != nil {
		return nil, e
	}
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return nil, fsError(p, err)
	}
	ent := entryOf(rel, fi)
	if ent.Type == "symlink" {
		ent.Target, _ = w.root.Readlink(rel)
	}
	return ent, nil
}

func (w *workspace) list(a wire.FSListRequest) (any, *wire.WireError) {
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	fi, err := w.root.Stat(rel)
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if !fi.IsDir() {
		return wire.FSListReply{Entries: []wire.Entry{entryOf(rel, fi)}}, nil
	}
	depth := a.Depth
	if depth <= 0 {
		depth = 1
	}
	max := a.Max
	if max <= 0 {
		max = 1000
	}
	rep := wire.FSListReply{Entries: []wire.Entry{}}
	base := strings.Count(rel, "/")
	if rel == "." {
		base = -1
	}
	walkErr := fs.WalkDir(w.root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == rel {
				return err
			}
			return nil
		}
		if p == rel {
			return nil
		}
		if !a.Hidden && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if len(rep.Entries) >= max {
			rep.Truncated = true
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		ent := entryOf(p, info)
		if ent.Type == "symlink" {
			ent.Target, _ = w.root.Readlink(p)
		}
		rep.Entries = append(rep.Entries, ent)
		if d.IsDir() && strings.Count(p, "/")-base >= depth {
			return fs.SkipDir
		}
		return nil
	})
	if walkErr != nil {
		return nil, fsError(a.Path, walkErr)
	}
	return rep, nil
}

func (w *workspace) mkdir(p string) (any, *wire.WireError) {
	rel, e := w.rel(p)
	if e != nil {
		return nil, e
	}
	if err := w.root.MkdirAll(rel, 0o755); err != nil {
		return nil, fsError(p, err)
	}
	return w.stat(p)
}

func (w *workspace) move(a wire.FSMoveRequest) (any, *wire.WireError) {
	from, e := w.rel(a.From)
	if e != nil {
		return nil, e
	}
	to, e := w.rel(a.To)
	if e != nil {
		return nil, e
	}
	if from == "." || to == "." {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "cannot move the workspace directory itself")
	}
	src, err := w.root.Lstat(from)
	if err != nil {
		return nil, fsError(a.From, err)
	}
	if src.IsDir() {
		// A directory cannot go below itself (the kernel says EINVAL), and
		// moving it onto itself with overwrite would first remove it.
		dst, err := w.root.Lstat(to)
		if to == from || strings.HasPrefix(to, from+"/") || (err == nil && os.SameFile(src, dst)) || w.within(src, filepath.Dir(to)) {
			return nil, wire.Errorf(wire.CodeInvalidArgument, "cannot move directory %q into itself (%q is inside it): choose a destination outside %q", a.From, a.To, a.From)
		}
	}
	if fi, err := w.root.Lstat(to); err == nil {
		if !a.Overwrite {
			return nil, wire.Errorf(wire.CodeExists, "destination %q already exists: set overwrite to replace it", a.To)
		}
		if fi.IsDir() {
			// Replacing a directory that holds the source would delete
			// the source with it before the rename.
			if strings.HasPrefix(from, to+"/") || w.within(fi, filepath.Dir(from)) {
				return nil, wire.Errorf(wire.CodeInvalidArgument, "cannot move %q onto %q: %q contains it, and replacing it would delete %q first; choose another destination", a.From, a.To, a.To, a.From)
			}
			if err := w.root.RemoveAll(to); err != nil {
				return nil, fsError(a.To, err)
			}
		}
	}
	if dir := filepath.Dir(to); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return nil, fsError(a.To, err)
		}
	}
	if err := w.root.Rename(from, to); err != nil {
		return nil, fsError(a.From, err)
	}
	return w.stat(a.To)
}

func (w *workspace) copy(a wire.FSMoveRequest) (any, *wire.WireError) {
	from, e := w.rel(a.From)
	if e != nil {
		return nil, e
	}
	to, e := w.rel(a.To)
	if e != nil {
		return nil, e
	}
	fi, err := w.root.Stat(from)
	if err != nil {
		return nil, fsError(a.From, err)
	}
	if _, err := w.root.Lstat(to); err == nil && !a.Overwrite {
		return nil, wire.Errorf(wire.CodeExists, "destination %q already exists: set overwrite to replace it", a.To)
	}
	if fi.IsDir() && (from == "." || to == from || strings.HasPrefix(to, from+"/") || w.within(fi, to)) {
		// The walk would find the copy it is making and recurse into it
		// until the deadline.
		what := fmt.Sprintf("directory %q", a.From)
		if from == "." {
			what = "the workspace directory"
		}
		return nil, wire.Errorf(wire.CodeInvalidArgument, "cannot copy %s into itself (%q is inside it): choose a destination outside it", what, a.To)
	}
	copyFile := func(src, dst string, mode fs.FileMode) *wire.WireError {
		return w.copyFile(src, dst, mode.Perm())
	}
	if !fi.IsDir() {
		if we := copyFile(from, to, fi.Mode()); we != nil {
			return nil, we
		}
		return w.stat(a.To)
	}
	var werr *wire.WireError
	walkErr := fs.WalkDir(w.root.FS(), from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(to, strings.TrimPrefix(p, from))
		switch {
		case d.IsDir():
			if err := w.root.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if werr = copyFile(p, target, info.Mode()); werr != nil {
				return werr
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := w.root.Readlink(p)
			if err == nil {
				_ = w.root.Symlink(link, target)
			}
		}
		return nil
	})
	if werr != nil {
		return nil, werr
	}
	if walkErr != nil {
		return nil, fsError(a.From, walkErr)
	}
	return w.stat(a.To)
}

// errCopyTooBig stops a streamed copy whose source passes the file-size limit.
var errCopyTooBig = errors.New("source passes the file size limit")

// copyFile copies the regular file src to dst with the destination rules of
// write (replaced atomically, through a link that stays inside), but
// streams the bytes: the agent is the sandbox's PID 1, and holding a big
// file in memory could get it OOM-killed and the whole sandbox with it.
func (w *workspace) copyFile(src, dst string, perm fs.FileMode) *wire.WireError {
	in, fi, e := w.openFile(src, src, os.O_RDONLY, 0)
	if e != nil {
		return e
	}
	defer in.Close()
	if dst == "." {
		return wire.Errorf(wire.CodeIsDir, "%q is the workspace directory: give a file name", dst)
	}
	target, e := w.resolveLinks(dst, dst)
	if e != nil {
		return e
	}
	var oldSize int64
	if dfi, err := w.root.Stat(target); err == nil {
		if dfi.IsDir() {
			return wire.Errorf(wire.CodeIsDir, "%q is a directory", dst)
		}
		oldSize = dfi.Size()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fsError(dst, err)
	}
	if qe := w.checkQuota(dst, fi.Size(), oldSize); qe != nil {
		return qe
	}
	return w.replaceFile(target, dst, perm&0o777, func(out *os.File) error {
		n, err := w.stream(out, in)
		if err == nil && n != fi.Size() {
			// The source changed size while it was copied: check the
			// size that was written. The temporary file is counted in
			// the usage now, so it is taken off with the old file.
			if qe := w.checkQuota(dst, n, oldSize+n); qe != nil {
				return qe
			}
		}
		return err
	})
}

// stream copies in (from its start, whatever its offset) to the empty file
// out through a small buffer, and returns the size copied. Holes are
// skipped with SEEK_DATA/SEEK_HOLE and the size set by a truncate, so a
// sparse file stays sparse instead of filling the disk with zeros. Past the
// file-size limit it stops with errCopyTooBig before writing more.
func (w *workspace) stream(out, in *os.File) (int64, error) {
	limit := w.fsize
	var pos int64
	for {
		data, err := seekData(in, pos)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole, or nothing, is left
		}
		if err != nil {
			// A file system without SEEK_DATA: copy the rest as it is.
			if limit > 0 {
				n, err := io.Copy(io.NewOffsetWriter(out, pos), io.NewSectionReader(in, pos, limit-pos+1))
				if err == nil && pos+n > limit {
					err = errCopyTooBig
				}
				return pos + n, err
			}
			n, err := io.Copy(io.NewOffsetWriter(out, pos), io.NewSectionReader(in, pos, math.MaxInt64-pos))
			return pos + n, err
		}
		hole, err := seekHole(in, data)
		if err != nil {
			return 0, err
		}
		if limit > 0 && hole > limit {
			return 0, errCopyTooBig
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			return 0, err
		}
		pos = hole
	}
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if limit > 0 && size > limit {
		return 0, errCopyTooBig
	}
	return size, out.Truncate(size)
}

func (w *workspace) remove(a wire.FSPathRequest) (any, *wire.WireError) {
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	if rel == "." {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "refusing to remove the workspace directory itself")
	}
	fi, err := w.root.Lstat(rel)
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if fi.IsDir() && a.Recursive {
		err = w.root.RemoveAll(rel)
	} else {
		err = w.root.Remove(rel)
	}
	if err != nil {
		var errno syscall.Errno
		if fi.IsDir() && !a.Recursive && errors.As(err, &errno) && (errno == syscall.ENOTEMPTY || errno == syscall.EEXIST) {
			// POSIX lets rmdir say EEXIST for a non-empty directory.
			return nil, wire.Errorf(wire.CodeInvalidArgument, "directory %q is not empty: pass recursive to remove it with its contents", a.Path)
		}
		return nil, fsError(a.Path, err)
	}
	return struct{}{}, nil
}

func (w *workspace) chmod(a wire.FSChmodRequest) (any, *wire.WireError) {
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	if a.Mode > 0o777 {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "mode %#o is not allowed: only permission bits (0-0777) can be set; setuid, setgid and sticky bits are refused", a.Mode)
	}
	if err := w.root.Chmod(rel, fs.FileMode(a.Mode)); err != nil {
		return nil, fsError(a.Path, err)
	}
	return w.stat(a.Path)
}

func (w *workspace) glob(a wire.FSGlobRequest) (any, *wire.WireError) {
	if a.Pattern == "" {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "glob pattern is empty: try \"*.py\" or \"src/**/*.go\"")
	}
	if _, err := path.Match(strings.ReplaceAll(a.Pattern, "**", "*"), ""); err != nil {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "bad glob pattern %q: %v", a.Pattern, err)
	}
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	max := a.Max
	if max <= 0 {
		max = 1000
	}
	rep := wire.FSGlobReply{Paths: []string{}}
	walkErr := fs.WalkDir(w.root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == rel {
				return err
			}
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") && p != rel {
			return fs.SkipDir
		}
		sub := strings.TrimPrefix(strings.TrimPrefix(p, rel), "/")
		if rel == "." {
			sub = p
		}
		if sub == "" || sub == "." {
			return nil
		}
		if globMatch(a.Pattern, sub) && !strings.HasPrefix(d.Name(), tempPrefix) {
			if len(rep.Paths) >= max {
				rep.Truncated = true
				return fs.SkipAll
			}
			rep.Paths = append(rep.Paths, p)
		}
		return nil
	})
	if walkErr != nil {
		return nil, fsError(a.Path, walkErr)
	}
	sort.Strings(rep.Paths)
	return rep, nil
}
