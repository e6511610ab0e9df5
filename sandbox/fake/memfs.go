package fake

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	agentserver "github.com/sandboxkit/sandboxkit/sandbox/agent/server"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// The in-memory workspace. It gives the file operations of the agent
// (sandbox/agent/fs.go) the same observable semantics: the same checks in
// the same order, the same error codes and the same messages, with os.Root
// confinement reproduced by the path walk below (".." may not climb above
// the root, absolute link targets and links leading out are refused, link
// chains stop after 8 links, as os.Root stops them).

// maxLinkHops is how many symbolic links one path may pass through: os.Root
// (which confines the real agent) gives up after 8, so a longer chain that
// works here would be an error on every real backend.
const maxLinkHops = 8

type nodeKind byte

const (
	kindFile nodeKind = iota
	kindDir
	kindLink
)

type node struct {
	kind   nodeKind
	perm   fs.FileMode
	data   []byte
	target string
	kids   map[string]*node
	mtime  time.Time
}

func newDir() *node {
	return &node{kind: kindDir, perm: 0o755, kids: map[string]*node{}, mtime: time.Now()}
}

func (n *node) size() int64 {
	switch n.kind {
	case kindFile:
		return int64(len(n.data))
	case kindLink:
		return int64(len(n.target))
	}
	return 0
}

// Errors of the walk, mapped to codes by fsError as the agent maps the
// corresponding errnos.
var (
	errNotExist = errors.New("no such file or directory")
	errExist    = errors.New("file exists")
	errNotDir   = errors.New("not a directory")
	errIsDir    = errors.New("is a directory")
	errEscape   = errors.New("path escapes from parent")
	errLoop     = errors.New("too many levels of symbolic links")
	errNotEmpty = errors.New("directory not empty")
	errInvalid  = errors.New("invalid argument")
)

func werr(code driver.Code, format string, args ...any) *wire.WireError {
	return &wire.WireError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// fsError maps a walk error to the coded error the agent sends for the
// same condition.
func fsError(p string, err error) *wire.WireError {
	var we *wire.WireError
	if errors.As(err, &we) {
		return we
	}
	switch {
	case errors.Is(err, errEscape):
		return werr(wire.CodePathEscape, "path %q resolves outside the workspace (through \"..\" or a symbolic link): access denied", p)
	case errors.Is(err, errNotExist):
		return werr(wire.CodeNotFound, "%q does not exist", p)
	case errors.Is(err, errExist):
		return werr(wire.CodeExists, "%q already exists", p)
	case errors.Is(err, errNotDir):
		return werr(wire.CodeNotDir, "a component of %q is not a directory", p)
	case errors.Is(err, errIsDir):
		return werr(wire.CodeIsDir, "%q is a directory", p)
	case errors.Is(err, errLoop):
		return werr(wire.CodePathEscape, "%q is a symbolic link loop or a link that cannot be followed safely", p)
	case errors.Is(err, errNotEmpty):
		return werr(wire.CodeInvalidArgument, "directory %q is not empty: pass recursive to remove it with its contents", p)
	}
	return werr(wire.CodeInternal, "%s: %v", p, err)
}

// memFS is the workspace. All methods lock mu: every operation is atomic,
// which is at least as strong as the agent's atomic rename.
type memFS struct {
	mu    sync.Mutex
	dir   string // the workspace path as the sandbox sees it
	root  *node
	fsize int64
	disk  int64
}

func newMemFS(dir string) *memFS {
	root := newDir()
	root.perm = 0o700 // as the local backend's temporary workspace
	return &memFS{dir: dir, root: root}
}

// rel is the agent's lexical check, with the same messages.
func (m *memFS) rel(p string) (string, *wire.WireError) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", werr(wire.CodeInvalidArgument, "path %q contains a NUL byte", p)
	}
	if !utf8.ValidString(p) {
		return "", werr(wire.CodeInvalidArgument, "path %q is not valid UTF-8", p)
	}
	if p == "" {
		return ".", nil
	}
	if path.IsAbs(p) {
		c := path.Clean(p)
		if c == m.dir {
			return ".", nil
		}
		if !strings.HasPrefix(c, m.dir+"/") {
			return "", werr(wire.CodePathEscape, "path %q is outside the workspace: use a path relative to the workspace or under %s", p, m.dir)
		}
		return c[len(m.dir)+1:], nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", werr(wire.CodePathEscape, "path %q leads outside the workspace (%s): remove the \"..\" components", p, m.dir)
	}
	return c, nil
}

// loc is where a path led: the directory holding it and the node (nil
// when the last component does not exist).
type loc struct {
	parent *node
	name   string
	node   *node
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// walk resolves rel inside the root the way os.Root does. Symbolic links
// in the middle are always followed, the last one only when follow is set.
func (m *memFS) walk(rel string, follow bool) (loc, error) {
	comps := splitPath(rel)
	stack := []*node{m.root}
	names := []string{""}
	hops := 0
	for i := 0; i < len(comps); i++ {
		c := comps[i]
		if c == ".." {
			if len(stack) == 1 {
				return loc{}, errEscape
			}
			stack, names = stack[:len(stack)-1], names[:len(names)-1]
			continue
		}
		cur := stack[len(stack)-1]
		if cur.kind != kindDir {
			return loc{}, errNotDir
		}
		last := i == len(comps)-1
		child := cur.kids[c]
		if child == nil {
			if last {
				return loc{parent: cur, name: c}, nil
			}
			return loc{}, errNotExist
		}
		if child.kind == kindLink && (!last || follow) {
			hops++
			if hops > maxLinkHops {
				return loc{}, errLoop
			}
			if path.IsAbs(child.target) {
				return loc{}, errEscape
			}
			comps = append(splitPath(child.target), comps[i+1:]...)
			i = -1
			continue
		}
		if last {
			return loc{parent: cur, name: c, node: child}, nil
		}
		stack, names = append(stack, child), append(names, c)
	}
	top := stack[len(stack)-1]
	if top.kind != kindDir {
		return loc{}, errNotDir
	}
	if len(stack) == 1 {
		return loc{node: m.root, name: "."}, nil
	}
	return loc{parent: stack[len(stack)-2], name: names[len(names)-1], node: top}, nil
}

// lookup returns the existing node at rel.
func (m *memFS) lookup(rel string, follow bool) (*node, error) {
	l, err := m.walk(rel, follow)
	if err != nil {
		return nil, err
	}
	if l.node == nil {
		return nil, errNotExist
	}
	return l.node, nil
}

// mkdirAll makes rel and its parents, like os.Root.MkdirAll.
func (m *memFS) mkdirAll(rel string) (*node, error) {
	l, err := m.walk(rel, true)
	if err != nil {
		if !errors.Is(err, errNotExist) {
			return nil, err
		}
		if _, err := m.mkdirAll(path.Dir(rel)); err != nil {
			return nil, err
		}
		if l, err = m.walk(rel, true); err != nil {
			return nil, err
		}
	}
	if l.node != nil {
		if l.node.kind != kindDir {
			return nil, errExist // as os.Root.MkdirAll reports an existing file
		}
		return l.node, nil
	}
	d := newDir()
	l.parent.kids[l.name] = d
	l.parent.mtime = time.Now()
	return d, nil
}

func (m *memFS) usage() int64 {
	var total int64
	var sum func(n *node)
	sum = func(n *node) {
		switch n.kind {
		case kindFile:
			total += int64(len(n.data))
		case kindDir:
			for _, k := range n.kids {
				sum(k)
			}
		}
	}
	sum(m.root)
	return total
}

func (m *memFS) checkQuota(p string, newSize, oldSize int64) *wire.WireError {
	if m.fsize > 0 && newSize > m.fsize {
		return werr(wire.CodeQuota, "writing %q would make it %d bytes, over the %d byte file size limit", p, newSize, m.fsize)
	}
	if m.disk > 0 {
		if used := m.usage(); used-oldSize+newSize > m.disk {
			return werr(wire.CodeQuota, "writing %q (%d bytes) would pass the workspace quota of %d bytes (%d in use): delete files first", p, newSize, m.disk, used)
		}
	}
	return nil
}

func entryOf(rel string, n *node) wire.Entry {
	e := wire.Entry{Path: rel, Size: n.size(), Mode: uint32(n.perm), ModTime: n.mtime.UnixNano()}
	switch n.kind {
	case kindFile:
		e.Type = "file"
	case kindDir:
		e.Type, e.Size = "dir", 0
	case kindLink:
		e.Type, e.Mode, e.Target = "symlink", 0o777, n.target
	}
	return e
}

// walkFn is called for every node below (and including) start, in
// lexical order, pre-order; it returns fs.SkipDir or fs.SkipAll like an
// fs.WalkDirFunc.
type walkFn func(rel string, n *node) error

func walkTree(rel string, n *node, fn walkFn) error {
	if err := fn(rel, n); err != nil {
		if errors.Is(err, fs.SkipDir) && n.kind == kindDir {
			return nil
		}
		return err
	}
	if n.kind != kindDir {
		return nil
	}
	names := make([]string, 0, len(n.kids))
	for k := range n.kids {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		k, ok := n.kids[name]
		if !ok {
			continue
		}
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		if err := walkTree(child, k, fn); err != nil {
			if errors.Is(err, fs.SkipDir) {
				if k.kind != kindDir {
					return nil // SkipDir on a file skips the rest of its directory
				}
				continue
			}
			return err
		}
	}
	return nil
}

// walkFrom walks the tree at rel (the start followed if it is a link).
func (m *memFS) walkFrom(rel string, fn walkFn) error {
	n, err := m.lookup(rel, true)
	if err != nil {
		return err
	}
	err = walkTree(rel, n, fn)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

const defaultMaxRead = 8 << 20

func isBinary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 }

func (m *memFS) read(a wire.FSReadRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	n, err := m.lookup(rel, true)
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if n.kind == kindDir {
		return nil, werr(wire.CodeIsDir, "%q is a directory: list it instead of reading it", a.Path)
	}
	max := a.MaxBytes
	if max <= 0 {
		max = defaultMaxRead
	}
	size := int64(len(n.data))
	rep := wire.FSReadReply{Size: size}
	if a.Limit <= 0 && a.Offset <= 0 {
		if size > max {
			return nil, werr(wire.CodeTooLarge, "%q is %d bytes, over the %d byte read limit: read a range of lines (offset/limit) or copy it out", a.Path, size, max)
		}
		rep.Data = bytes.Clone(n.data)
		if rep.Data == nil {
			rep.Data = []byte{}
		}
		rep.Binary = isBinary(rep.Data)
		return rep, nil
	}
	data := n.data
	if isBinary(data) {
		rep.Binary = true
		return rep, nil
	}
	line, start := 0, 0
	var out []byte
	for start < len(data) {
		next := len(data)
		if end := bytes.IndexByte(data[start:], '\n'); end >= 0 {
			next = start + end + 1
		}
		if line >= a.Offset {
			if a.Limit > 0 && rep.Lines >= a.Limit {
				rep.More = true
				break
			}
			if int64(len(out)+next-start) > max {
				rep.Truncated, rep.More = true, true
				break
			}
			out = append(out, data[start:next]...)
			rep.Lines++
		}
		line++
		start = next
	}
	rep.Data = out
	return rep, nil
}

func (m *memFS) write(a wire.FSWriteRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writeLocked(a)
}

func (m *memFS) writeLocked(a wire.FSWriteRequest) (any, *wire.WireError) {
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	if rel == "." {
		return nil, werr(wire.CodeIsDir, "%q is the workspace directory: give a file name", a.Path)
	}
	mode := fs.FileMode(a.Mode) & 0o777
	l, err := m.walk(rel, false)
	if err != nil && !errors.Is(err, errNotExist) {
		return nil, fsError(a.Path, err)
	}
	var oldSize int64
	if err == nil && l.node != nil {
		switch l.node.kind {
		case kindDir:
			return nil, werr(wire.CodeIsDir, "%q is a directory", a.Path)
		case kindLink:
			// Write through the link, where it stays inside.
			t, terr := m.walk(rel, true)
			if terr != nil {
				return nil, fsError(a.Path, terr)
			}
			if t.node != nil {
				if t.node.kind == kindDir {
					return nil, fsError(a.Path, errIsDir)
				}
				oldSize = t.node.size()
			}
			if mode == 0 {
				mode = 0o644
			}
			return m.put(a, t, rel, oldSize, mode)
		}
		oldSize = l.node.size()
		if mode == 0 {
			mode = l.node.perm
		}
	}
	if mode == 0 {
		mode = 0o644
	}
	newSize := int64(len(a.Data))
	if a.Append {
		newSize += oldSize
	}
	if qe := m.checkQuota(a.Path, newSize, oldSize); qe != nil {
		return nil, qe
	}
	if dir := path.Dir(rel); dir != "." {
		if _, err := m.mkdirAll(dir); err != nil {
			return nil, fsError(a.Path, err)
		}
	}
	if l, err = m.walk(rel, false); err != nil {
		return nil, fsError(a.Path, err)
	}
	return m.put(a, l, rel, oldSize, mode)
}

// put stores the data at l (an existing file or a free name).
func (m *memFS) put(a wire.FSWriteRequest, l loc, rel string, oldSize int64, mode fs.FileMode) (any, *wire.WireError) {
	newSize := int64(len(a.Data))
	if a.Append {
		newSize += oldSize
	}
	if qe := m.checkQuota(a.Path, newSize, oldSize); qe != nil {
		return nil, qe
	}
	now := time.Now()
	if a.Append && l.node != nil {
		l.node.data = append(l.node.data, a.Data...)
		l.node.mtime = now
		return wire.Entry{Path: rel, Type: "file", Size: newSize, Mode: uint32(mode)}, nil
	}
	// A new node, as the agent's write-and-rename makes a new inode.
	l.parent.kids[l.name] = &node{kind: kindFile, perm: mode, data: bytes.Clone(a.Data), mtime: now}
	l.parent.mtime = now
	return wire.Entry{Path: rel, Type: "file", Size: newSize, Mode: uint32(mode)}, nil
}

func (m *memFS) edit(a wire.FSEditRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.Old == "" {
		return nil, werr(wire.CodeInvalidArgument, "old text is empty: give the exact text to replace (use write to create a file)")
	}
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	n, err := m.lookup(rel, true)
	if err == nil && n.kind == kindDir {
		err = errIsDir
	}
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if isBinary(n.data) {
		return nil, werr(wire.CodeBinary, "%q is a binary file: it cannot be edited as text", a.Path)
	}
	s := string(n.data)
	count := strings.Count(s, a.Old)
	switch {
	case count == 0:
		return nil, werr(wire.CodeNoMatch, "the old text was not found in %q: read the file and copy the exact text, including whitespace and indentation", a.Path)
	case count > 1 && !a.ReplaceAll:
		var lines []string
		off := 0
		for range min(count, 10) {
			i := strings.Index(s[off:], a.Old)
			lines = append(lines, strconv.Itoa(strings.Count(s[:off+i], "\n")+1))
			off += i + len(a.Old)
		}
		return nil, werr(wire.CodeAmbiguous, "the old text occurs %d times in %q (lines %s): include more surrounding text to make it unique, or set replace_all", count, a.Path, strings.Join(lines, ", "))
	}
	out := strings.Replace(s, a.Old, a.New, 1)
	if a.ReplaceAll {
		out = strings.ReplaceAll(s, a.Old, a.New)
	} else {
		count = 1
	}
	if _, we := m.writeLocked(wire.FSWriteRequest{Path: a.Path, Data: []byte(out)}); we != nil {
		return nil, we
	}
	return wire.FSEditReply{Replacements: count}, nil
}

func (m *memFS) statLocked(p string) (any, *wire.WireError) {
	rel, e := m.rel(p)
	if e != nil {
		return nil, e
	}
	n, err := m.lookup(rel, false)
	if err != nil {
		return nil, fsError(p, err)
	}
	return entryOf(rel, n), nil
}

func (m *memFS) stat(p string) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statLocked(p)
}

func (m *memFS) list(a wire.FSListRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	n, err := m.lookup(rel, true)
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if n.kind != kindDir {
		return wire.FSListReply{Entries: []wire.Entry{entryOf(rel, n)}}, nil
	}
	depth := max(a.Depth, 1)
	limit := a.Max
	if limit <= 0 {
		limit = 1000
	}
	rep := wire.FSListReply{Entries: []wire.Entry{}}
	base := strings.Count(rel, "/")
	if rel == "." {
		base = -1
	}
	_ = m.walkFrom(rel, func(p string, n *node) error {
		if p == rel {
			return nil
		}
		if !a.Hidden && strings.HasPrefix(path.Base(p), ".") {
			if n.kind == kindDir {
				return fs.SkipDir
			}
			return nil
		}
		if len(rep.Entries) >= limit {
			rep.Truncated = true
			return fs.SkipAll
		}
		rep.Entries = append(rep.Entries, entryOf(p, n))
		if n.kind == kindDir && strings.Count(p, "/")-base >= depth {
			return fs.SkipDir
		}
		return nil
	})
	return rep, nil
}

func (m *memFS) mkdir(p string) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel, e := m.rel(p)
	if e != nil {
		return nil, e
	}
	if _, err := m.mkdirAll(rel); err != nil {
		return nil, fsError(p, err)
	}
	return m.statLocked(p)
}

func (m *memFS) move(a wire.FSMoveRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from, e := m.rel(a.From)
	if e != nil {
		return nil, e
	}
	to, e := m.rel(a.To)
	if e != nil {
		return nil, e
	}
	if from == "." || to == "." {
		return nil, werr(wire.CodeInvalidArgument, "cannot move the workspace directory itself")
	}
	src, err := m.walk(from, false)
	if err == nil && src.node == nil {
		err = errNotExist
	}
	if err != nil {
		return nil, fsError(a.From, err)
	}
	if src.node.kind == kindDir {
		// As the agent: refused before anything is removed or made.
		dst, err := m.walk(to, false)
		if (err == nil && dst.node == src.node) || m.below(src.node, path.Dir(to)) {
			return nil, werr(wire.CodeInvalidArgument, "cannot move directory %q into itself (%q is inside it): choose a destination outside %q", a.From, a.To, a.From)
		}
	}
	if dst, err := m.walk(to, false); err == nil && dst.node != nil {
		if !a.Overwrite {
			return nil, werr(wire.CodeExists, "destination %q already exists: set overwrite to replace it", a.To)
		}
		if dst.node.kind == kindDir {
			// As the agent: replacing a directory that holds the source
			// would delete the source with it.
			if m.below(dst.node, path.Dir(from)) {
				return nil, werr(wire.CodeInvalidArgument, "cannot move %q onto %q: %q contains it, and replacing it would delete %q first; choose another destination", a.From, a.To, a.To, a.From)
			}
			delete(dst.parent.kids, dst.name)
		}
	}
	if dir := path.Dir(to); dir != "." {
		if _, err := m.mkdirAll(dir); err != nil {
			return nil, fsError(a.To, err)
		}
	}
	dst, err := m.walk(to, false)
	if err != nil {
		return nil, fsError(a.From, err)
	}
	if src.node.kind == kindDir && (dst.parent == src.node || m.inside(dst.parent, src.node)) {
		return nil, fsError(a.From, errInvalid)
	}
	if dst.node != nil && dst.node.kind == kindDir && src.node.kind != kindDir {
		return nil, fsError(a.From, errIsDir)
	}
	if dst.node != nil && dst.node.kind != kindDir && src.node.kind == kindDir {
		return nil, fsError(a.From, errNotDir)
	}
	delete(src.parent.kids, src.name)
	dst.parent.kids[dst.name] = src.node
	now := time.Now()
	src.parent.mtime, dst.parent.mtime = now, now
	return m.statLocked(a.To)
}

// below reports whether the directory p (links followed), or its deepest
// existing ancestor, is top or lies in the tree below it.
func (m *memFS) below(top *node, p string) bool {
	for {
		if n, err := m.lookup(p, true); err == nil && n.kind == kindDir {
			return n == top || m.inside(n, top)
		}
		if p == "." || p == "/" || p == "" {
			return false
		}
		p = path.Dir(p)
	}
}

// inside reports whether dir lies in the tree below top.
func (m *memFS) inside(dir, top *node) bool {
	if top.kind != kindDir {
		return false
	}
	for _, k := range top.kids {
		if k == dir || m.inside(dir, k) {
			return true
		}
	}
	return false
}

func (m *memFS) copy(a wire.FSMoveRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from, e := m.rel(a.From)
	if e != nil {
		return nil, e
	}
	to, e := m.rel(a.To)
	if e != nil {
		return nil, e
	}
	src, err := m.lookup(from, true)
	if err != nil {
		return nil, fsError(a.From, err)
	}
	if dst, err := m.walk(to, false); err == nil && dst.node != nil && !a.Overwrite {
		return nil, werr(wire.CodeExists, "destination %q already exists: set overwrite to replace it", a.To)
	}
	if src.kind == kindDir && (to == from || strings.HasPrefix(to, from+"/") || from == "." || m.below(src, to)) {
		return nil, werr(wire.CodeInvalidArgument, "cannot copy %q into itself", a.From)
	}
	copyFile := func(n *node, dst string) *wire.WireError {
		_, we := m.writeLocked(wire.FSWriteRequest{Path: dst, Data: n.data, Mode: uint32(n.perm)})
		return we
	}
	if src.kind != kindDir {
		if we := copyFile(src, to); we != nil {
			return nil, we
		}
		return m.statLocked(a.To)
	}
	// Snapshot the tree first: copying into a sibling must not see its own output.
	type item struct {
		rel string
		n   *node
	}
	var items []item
	_ = walkTree(from, src, func(p string, n *node) error {
		items = append(items, item{p, n})
		return nil
	})
	for _, it := range items {
		target := to + strings.TrimPrefix(it.rel, from)
		if from == "." {
			target = path.Join(to, it.rel)
		}
		switch it.n.kind {
		case kindDir:
			if _, err := m.mkdirAll(target); err != nil {
				return nil, fsError(a.From, err)
			}
		case kindFile:
			if we := copyFile(it.n, target); we != nil {
				return nil, we
			}
		case kindLink:
			if l, err := m.walk(target, false); err == nil && l.node == nil {
				l.parent.kids[l.name] = &node{kind: kindLink, perm: 0o777, target: it.n.target, mtime: time.Now()}
			}
		}
	}
	return m.statLocked(a.To)
}

func (m *memFS) remove(a wire.FSPathRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	if rel == "." {
		return nil, werr(wire.CodeInvalidArgument, "refusing to remove the workspace directory itself")
	}
	l, err := m.walk(rel, false)
	if err == nil && l.node == nil {
		err = errNotExist
	}
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if l.node.kind == kindDir && !a.Recursive && len(l.node.kids) > 0 {
		return nil, fsError(a.Path, errNotEmpty)
	}
	delete(l.parent.kids, l.name)
	l.parent.mtime = time.Now()
	return struct{}{}, nil
}

func (m *memFS) chmod(a wire.FSChmodRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	if a.Mode > 0o777 {
		return nil, werr(wire.CodeInvalidArgument, "mode %#o is not allowed: only permission bits (0-0777) can be set; setuid, setgid and sticky bits are refused", a.Mode)
	}
	n, err := m.lookup(rel, true)
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	n.perm = fs.FileMode(a.Mode)
	return m.statLocked(a.Path)
}

// symlink makes a link at rel (for scripted commands such as ln -s).
func (m *memFS) symlink(target, p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel, e := m.rel(p)
	if e != nil {
		return e
	}
	l, err := m.walk(rel, false)
	if err == nil && l.node != nil {
		err = errExist
	}
	if err != nil {
		return fsError(p, err)
	}
	l.parent.kids[l.name] = &node{kind: kindLink, perm: 0o777, target: target, mtime: time.Now()}
	return nil
}

func (m *memFS) glob(a wire.FSGlobRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.Pattern == "" {
		return nil, werr(wire.CodeInvalidArgument, "glob pattern is empty: try \"*.py\" or \"src/**/*.go\"")
	}
	if _, err := path.Match(strings.ReplaceAll(a.Pattern, "**", "*"), ""); err != nil {
		return nil, werr(wire.CodeInvalidArgument, "bad glob pattern %q: %v", a.Pattern, err)
	}
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	limit := a.Max
	if limit <= 0 {
		limit = 1000
	}
	rep := wire.FSGlobReply{Paths: []string{}}
	err := m.walkFrom(rel, func(p string, n *node) error {
		if n.kind == kindDir && p != rel && (path.Base(p) == ".git" || path.Base(p) == "node_modules") {
			return fs.SkipDir
		}
		sub := strings.TrimPrefix(strings.TrimPrefix(p, rel), "/")
		if rel == "." {
			sub = p
		}
		if sub == "" || sub == "." {
			return nil
		}
		if agentserver.GlobMatch(a.Pattern, sub) {
			if len(rep.Paths) >= limit {
				rep.Truncated = true
				return fs.SkipAll
			}
			rep.Paths = append(rep.Paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	slices.Sort(rep.Paths)
	return rep, nil
}
