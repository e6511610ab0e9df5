package agent

import (
	"archive/tar"
	"context"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
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
