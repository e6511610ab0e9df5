package server

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

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
func (w *workspace) copyIn(r *request, dir string) (any, *wire.WireError) {
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
	var rep wire.FSCopyReply
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return rep, nil
		}
		if err != nil {
			return nil, tarSourceError(r, "", "", err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || !utf8.ValidString(name) {
			return nil, wire.Errorf(wire.CodePathEscape, "tar entry %q leads outside the destination", shortName(h.Name))
		}
		if e := checkEntryName(h.Name); e != nil {
			return nil, e
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
				return nil, wire.Errorf(wire.CodeQuota, "tar entry %q is %d bytes, over the %d byte file size limit", h.Name, h.Size, w.fsize)
			}
			if used >= 0 && used+h.Size > w.disk {
				return nil, wire.Errorf(wire.CodeQuota, "tar entry %q would pass the workspace quota of %d bytes", h.Name, w.disk)
			}
			// Replaced atomically: a stream that fails or is cut inside
			// the entry (a kill, a failing source on the host, a full
			// disk) leaves the old file as it was.
			src := &sourceReader{r: tr}
			var n int64
			e := w.replaceFile(target, target, mode, func(f *os.File) error {
				var err error
				n, err = io.Copy(f, src)
				if src.err != nil {
					return tarSourceError(r, h.Name, target, src.err)
				}
				return err
			})
			if e != nil {
				return nil, e
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
				return nil, wire.Errorf(wire.CodePathEscape, "tar hard link %q -> %q leads outside the destination", h.Name, h.Linkname)
			}
			if err := w.root.Link(filepath.Join(base, old), target); err != nil {
				return nil, fsError(target, err)
			}
		default:
			// Devices, fifos and the like are skipped: they have no place in a workspace.
		}
	}
}

// checkEntryName refuses a tar entry name a copy-in must not create: one
// with a control character (a newline reads as two names in every
// listing) or with a component longer than a file system takes (255
// bytes).
func checkEntryName(name string) *wire.WireError {
	if strings.ContainsFunc(name, unicode.IsControl) {
		return wire.Errorf(wire.CodeInvalidArgument, "tar entry %q has a control character in its name: file names may not contain newlines, tabs or other control characters", shortName(name))
	}
	for _, part := range strings.Split(name, "/") {
		if len(part) > 255 {
			return wire.Errorf(wire.CodeInvalidArgument, "tar entry %q has a name of %d bytes, over the limit of 255 for one file or directory name", shortName(name), len(part))
		}
	}
	return nil
}

// sourceReader records the error of the stream it reads, so that a copy
// can tell the source failing from the destination failing.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// tarSourceError explains a tar stream that failed, inside entry name
// (extracted to target) when name is set: cancelled by the client (whose
// own source may have failed: it says why), or ended or malformed.
func tarSourceError(r *request, name, target string, err error) *wire.WireError {
	kept := ""
	if name != "" {
		kept = fmt.Sprintf(" inside entry %q; %q was left as it was (entries before it were written)", name, target)
	}
	if r.ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return wire.Errorf(wire.CodeCanceled, "copy-in cancelled%s", kept)
	}
	return wire.Errorf(wire.CodeInvalidArgument, "reading the tar stream failed%s: %v", kept, err)
}

// frameWriter streams tar output as data frames.
type frameWriter struct{ r *request }

func (fw frameWriter) Write(p []byte) (int, error) {
	if !fw.r.sendData(wire.FrameStdout, p) {
		return 0, context.Canceled
	}
	return len(p), nil
}

func (w *workspace) copyOut(r *request, p string) (any, *wire.WireError) {
	rel, e := w.rel(p)
	if e != nil {
		return nil, e
	}
	fi, err := w.root.Stat(rel)
	if err != nil {
		return nil, fsError(p, err)
	}
	tw := tar.NewWriter(frameWriter{r: r})
	var rep wire.FSCopyReply
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
