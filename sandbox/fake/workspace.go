package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Workspace is the fake sandbox's workspace as a test sees it: it lets a
// test prepare files before the code under test runs, check what it left
// behind, and lets scripted commands have effects. Paths are relative to
// the workspace, or absolute under it (WorkspacePath). Errors are
// *sandbox.Error values with the same codes the sandbox's Files service
// returns: the Workspace is served by the same agent server code, on the
// same directory, over a connection of its own, whose calls are not
// recorded.
type Workspace struct {
	fk *Fake
}

// conn returns the workspace's own agent connection, made on first use.
func (w *Workspace) conn() (*agent.Client, error) {
	fk := w.fk
	fk.wsOnce.Do(func() {
		fk.wsClient, fk.wsErr = fk.dialWorkspace()
	})
	return fk.wsClient, fk.wsErr
}

func (w *Workspace) do(op, wsOp string, args, out any) error {
	c, err := w.conn()
	if err == nil {
		err = c.Do(context.Background(), op, args, out)
	}
	return wsErr(wsOp, err)
}

// wsErr turns an error of the workspace's connection into the
// *sandbox.Error the Files service would return.
func wsErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var we *wire.WireError
	if errors.As(err, &we) {
		return &sandbox.Error{Code: we.Code, Op: op, Message: we.Message}
	}
	return &sandbox.Error{Code: sandbox.CodeDead, Op: op, Message: "the fake sandbox's workspace connection failed: " + err.Error(), Err: err}
}

// WriteFile creates or replaces a file (parents are made); mode 0 means
// 0644, or the mode of the file it replaces.
func (w *Workspace) WriteFile(path string, data []byte, mode fs.FileMode) error {
	return w.do("fs.write", "Workspace.WriteFile", wire.FSWriteRequest{Path: path, Data: data, Mode: uint32(mode)}, nil)
}

// ReadFile returns a file's content.
func (w *Workspace) ReadFile(path string) ([]byte, error) {
	var rep wire.FSReadReply
	if err := w.do("fs.read", "Workspace.ReadFile", wire.FSReadRequest{Path: path, MaxBytes: 1 << 62}, &rep); err != nil {
		return nil, err
	}
	return rep.Data, nil
}

// Mode returns the permission bits of a file or directory (links followed).
func (w *Workspace) Mode(p string) (fs.FileMode, error) {
	const op = "Workspace.Mode"
	var e wire.Entry
	if err := w.do("fs.stat", op, wire.FSPathRequest{Path: p}, &e); err != nil {
		return 0, err
	}
	// The file API's stat does not follow links: follow them one stat at
	// a time, each one confined by the server, and refuse an absolute
	// target as os.Root does (a link leading out is SBX_PATH_ESCAPE).
	for range 40 {
		if e.Type != "symlink" {
			return fs.FileMode(e.Mode).Perm(), nil
		}
		if path.IsAbs(e.Target) {
			return 0, &sandbox.Error{Code: sandbox.CodePathEscape, Op: op, Message: fmt.Sprintf("%q is a symbolic link to the absolute path %q, which the workspace does not follow", p, e.Target)}
		}
		if err := w.do("fs.stat", op, wire.FSPathRequest{Path: path.Join(path.Dir(e.Path), e.Target)}, &e); err != nil {
			return 0, err
		}
	}
	return 0, &sandbox.Error{Code: sandbox.CodePathEscape, Op: op, Message: fmt.Sprintf("%q is a symbolic link loop", p)}
}

// Symlink makes path a symbolic link to target (as `ln -s target path`).
func (w *Workspace) Symlink(target, name string) error {
	const op = "Workspace.Symlink"
	c, err := w.conn()
	if err != nil {
		return wsErr(op, err)
	}
	// The file API makes links only from a tar stream (CopyIn).
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: path.Base(name), Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink})
	_ = tw.Close()
	call, err := c.Start("fs.copyin", wire.FSPathRequest{Path: path.Dir(name)}, agent.Handlers{})
	if err != nil {
		return wsErr(op, err)
	}
	go func() {
		_, _ = io.Copy(call, &b)
		_ = call.CloseInput()
	}()
	_, err = call.Wait()
	return wsErr(op, err)
}

// Mkdir makes a directory and its parents.
func (w *Workspace) Mkdir(path string) error {
	return w.do("fs.mkdir", "Workspace.Mkdir", wire.FSPathRequest{Path: path}, nil)
}

// Remove deletes a file, or a directory with everything in it.
func (w *Workspace) Remove(path string) error {
	return w.do("fs.remove", "Workspace.Remove", wire.FSPathRequest{Path: path, Recursive: true}, nil)
}

// Paths lists every file, directory and link in the workspace, sorted.
func (w *Workspace) Paths() []string {
	var l wire.FSListReply
	if w.do("fs.list", "Workspace.Paths", wire.FSListRequest{Depth: 1 << 30, Hidden: true, Max: 1 << 30}, &l) != nil {
		return nil
	}
	out := make([]string, 0, len(l.Entries))
	for _, e := range l.Entries {
		out = append(out, e.Path)
	}
	slices.Sort(out)
	return out
}
