package fake

import (
	"archive/tar"
	"context"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	agentserver "github.com/sandboxkit/sandboxkit/sandbox/agent/server"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

const (
	defaultMaxResults = 200
	maxSearchFile     = 32 << 20
)

func (m *memFS) search(ctx context.Context, a wire.FSSearchRequest) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// The agent's own line matcher: the same semantics (per line, linear
	// in the input) by construction.
	lm, e := agentserver.NewLineMatcher(a.Pattern, a.IgnoreCase)
	if e != nil {
		return nil, e
	}
	rel, e := m.rel(a.Path)
	if e != nil {
		return nil, e
	}
	for _, g := range append(append([]string{}, a.Include...), a.Exclude...) {
		if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
			return nil, werr(wire.CodeInvalidArgument, "bad glob %q: %v", g, err)
		}
	}
	limit := a.MaxResults
	if limit <= 0 {
		limit = defaultMaxResults
	}
	rep := wire.FSSearchReply{Matches: []wire.Match{}}
	total := 0
	walkErr := m.walkFrom(rel, func(p string, n *node) error {
		if n.kind == kindDir {
			if p != rel && !a.All && (path.Base(p) == ".git" || path.Base(p) == "node_modules") {
				return fs.SkipDir
			}
			return nil
		}
		if n.kind != kindFile {
			return nil
		}
		if !agentserver.SearchSelects(rel, p, a.Include, a.Exclude) {
			return nil
		}
		if total > limit || ctx.Err() != nil {
			return fs.SkipAll // one match past the limit proves the cut
		}
		rep.Files++
		if len(n.data) > maxSearchFile {
			return nil
		}
		if isBinary(n.data) {
			found := false
			_ = lm.EachLine(ctx, n.data, func(int, int) bool { found = true; return false })
			if found {
				rep.SkippedBinary++
			}
			return nil
		}
		matches, _ := lm.Matches(ctx, p, n.data)
		for _, mt := range matches {
			total++
			if len(rep.Matches) >= limit {
				rep.Truncated = true
				continue
			}
			rep.Matches = append(rep.Matches, mt)
		}
		return nil
	})
	if walkErr != nil {
		return nil, fsError(a.Path, walkErr)
	}
	if ctx.Err() != nil {
		return nil, werr(wire.CodeCanceled, "search %q cancelled", a.Pattern)
	}
	if total > limit {
		rep.Truncated = true
	}
	return rep, nil
}

// copyIn extracts a tar stream into dir, with the agent's confinement of
// entry names and its limits.
func (m *memFS) copyIn(dir string, in io.Reader) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	base, e := m.rel(dir)
	if e != nil {
		return nil, e
	}
	if _, err := m.mkdirAll(base); err != nil {
		return nil, fsError(dir, err)
	}
	used := int64(-1)
	if m.disk > 0 {
		used = m.usage()
	}
	tr := tar.NewReader(in)
	var rep wire.FSCopyReply
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return rep, nil
		}
		if err != nil {
			return nil, werr(wire.CodeInvalidArgument, "reading the tar stream: %v", err)
		}
		name := path.Clean(h.Name)
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || !utf8.ValidString(name) {
			return nil, werr(wire.CodePathEscape, "tar entry %q leads outside the destination", h.Name)
		}
		if e := agentserver.CheckEntryName(h.Name); e != nil {
			return nil, e
		}
		target := path.Join(base, name)
		if d := path.Dir(target); d != "." {
			if _, err := m.mkdirAll(d); err != nil {
				return nil, fsError(target, err)
			}
		}
		mode := fs.FileMode(h.Mode) & 0o777
		switch h.Typeflag {
		case tar.TypeDir:
			if _, err := m.mkdirAll(target); err != nil {
				return nil, fsError(target, err)
			}
		case tar.TypeReg:
			if m.fsize > 0 && h.Size > m.fsize {
				return nil, werr(wire.CodeQuota, "tar entry %q is %d bytes, over the %d byte file size limit", h.Name, h.Size, m.fsize)
			}
			if used >= 0 && used+h.Size > m.disk {
				return nil, werr(wire.CodeQuota, "tar entry %q would pass the workspace quota of %d bytes", h.Name, m.disk)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, werr(wire.CodeInvalidArgument, "reading the tar stream: %v", err)
			}
			l, err := m.walk(target, true)
			if err == nil && l.node != nil && l.node.kind == kindDir {
				err = errIsDir
			}
			if err != nil {
				return nil, fsError(target, err)
			}
			if l.node != nil {
				l.node.data, l.node.perm, l.node.mtime = data, mode, time.Now()
			} else {
				l.parent.kids[l.name] = &node{kind: kindFile, perm: mode, data: data, mtime: time.Now()}
			}
			if used >= 0 {
				used += int64(len(data))
			}
			rep.Files++
			rep.Bytes += int64(len(data))
		case tar.TypeSymlink:
			if l, err := m.walk(target, false); err == nil && l.node != nil && l.node.kind != kindDir {
				delete(l.parent.kids, l.name)
			}
			l, err := m.walk(target, false)
			if err == nil && l.node != nil {
				err = errExist
			}
			if err != nil {
				return nil, fsError(target, err)
			}
			l.parent.kids[l.name] = &node{kind: kindLink, perm: 0o777, target: h.Linkname, mtime: time.Now()}
		case tar.TypeLink:
			old := path.Clean(h.Linkname)
			if path.IsAbs(old) || old == ".." || strings.HasPrefix(old, "../") {
				return nil, werr(wire.CodePathEscape, "tar hard link %q -> %q leads outside the destination", h.Name, h.Linkname)
			}
			src, err := m.lookup(path.Join(base, old), false)
			if err == nil && src.kind == kindDir {
				err = errInvalid
			}
			if err != nil {
				return nil, fsError(target, err)
			}
			l, err := m.walk(target, false)
			if err == nil && l.node != nil {
				err = errExist
			}
			if err != nil {
				return nil, fsError(target, err)
			}
			l.parent.kids[l.name] = src // a hard link shares the node
		}
	}
}

// copyOut writes path (a file or a tree) as a tar stream to w.
func (m *memFS) copyOut(p string, w io.Writer) (any, *wire.WireError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel, e := m.rel(p)
	if e != nil {
		return nil, e
	}
	top, err := m.lookup(rel, true)
	if err != nil {
		return nil, fsError(p, err)
	}
	tw := tar.NewWriter(w)
	var rep wire.FSCopyReply
	add := func(name string, n *node) error {
		h := &tar.Header{Name: name, Mode: int64(n.perm), ModTime: n.mtime, Format: tar.FormatPAX}
		switch n.kind {
		case kindDir:
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		case kindLink:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, n.target, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(n.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if n.kind == kindFile {
			if _, err := tw.Write(n.data); err != nil {
				return err
			}
			rep.Files++
			rep.Bytes += int64(len(n.data))
		}
		return nil
	}
	if top.kind != kindDir {
		err = add(path.Base(rel), top)
	} else {
		err = walkTree(rel, top, func(q string, n *node) error {
			if q == rel {
				return nil
			}
			name := strings.TrimPrefix(strings.TrimPrefix(q, rel), "/")
			if rel == "." {
				name = q
			}
			return add(name, n)
		})
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, werr(wire.CodeCanceled, "copying %q out: %v", p, err)
	}
	return rep, nil
}
