package fake

import (
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Kind says what a recorded call was.
type Kind string

// The kinds of recorded calls.
const (
	KindCommand Kind = "command" // Commands.Run, run_command
	KindJob     Kind = "job"     // Commands.Start and the job operations
	KindPython  Kind = "python"  // a Python cell
	KindShell   Kind = "shell"   // a command or input in a bash session
	KindFile    Kind = "file"    // a file operation (read, write, search, ...)
)

// Policy is what was in force for a call: the sandbox's network setting,
// isolation tier as reported, limits, and the call's own timeout.
type Policy struct {
	// Network is true only when the sandbox was created WithNetwork.
	Network bool
	// Isolation is the tier the sandbox reported (see ReportTier).
	Isolation sandbox.Tier
	// Limits are the sandbox's limits, defaults filled in.
	Limits sandbox.Limits
	// Timeout is the call's own timeout as the sandbox passed it: 0 for
	// a background job without one, a file operation, and Python cells
	// and session commands (their timeouts are kept on the host side and
	// never reach a backend; Limits.Timeout is their default).
	Timeout time.Duration
	// Env is the whole environment a command would have run with.
	Env []string
}

// Call is one recorded call.
type Call struct {
	// Kind says what the call was (command, job, python, shell, file).
	Kind Kind
	// Op is the agent operation ("exec", "fs.write", "job.kill", ...) or,
	// for Python and shells, "python.run", "shell.run", "shell.input".
	Op string
	// Text is the command line, the Python code, the shell command or
	// input, or the path of a file operation.
	Text string
	// Args is the argv of a command; for moves and copies, {from, to}.
	Args []string
	// Dir is a command's working directory as asked ("" = the workspace).
	Dir string
	// Env holds the variables the call itself added.
	Env []string
	// Scripted reports that a rule of the script answered it (always true
	// for file operations, which the workspace serves).
	Scripted bool
	// Err is the error code the fake answered with, "" for success.
	Err string
	// Policy is what was in force.
	Policy Policy
	// Time is when the call reached the fake.
	Time time.Time
}

// recorder keeps every call.
type recorder struct {
	mu    sync.Mutex
	calls []Call
}

func (r *recorder) add(c Call) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.Time = time.Now()
	r.calls = append(r.calls, c)
	return len(r.calls) - 1
}

func (r *recorder) setErr(i int, code string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= 0 && i < len(r.calls) {
		r.calls[i].Err = code
	}
}

func (r *recorder) markScripted(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= 0 && i < len(r.calls) {
		r.calls[i].Scripted = true
	}
}

func (r *recorder) all() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Workspace is the fake sandbox's in-memory workspace as a test sees it:
// it lets a test prepare files before the code under test runs, check what
// it left behind, and lets scripted commands have effects. Paths are
// relative to the workspace, or absolute under it. Errors are
// *sandbox.Error values with the same codes the sandbox's Files service
// returns.
type Workspace struct{ m *memFS }

func wsErr(op string, e *wire.WireError) error {
	if e == nil {
		return nil
	}
	return &sandbox.Error{Code: e.Code, Op: op, Message: e.Message}
}

// WriteFile creates or replaces a file (parents are made); mode 0 means
// 0644, or the mode of the file it replaces.
func (w *Workspace) WriteFile(path string, data []byte, mode fs.FileMode) error {
	_, e := w.m.write(wire.FSWriteRequest{Path: path, Data: data, Mode: uint32(mode)})
	return wsErr("Workspace.WriteFile", e)
}

// ReadFile returns a file's content.
func (w *Workspace) ReadFile(path string) ([]byte, error) {
	rep, e := w.m.read(wire.FSReadRequest{Path: path, MaxBytes: 1 << 62})
	if e != nil {
		return nil, wsErr("Workspace.ReadFile", e)
	}
	return rep.(wire.FSReadReply).Data, nil
}

// Mode returns the permission bits of a file or directory (links followed).
func (w *Workspace) Mode(path string) (fs.FileMode, error) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	rel, e := w.m.rel(path)
	if e != nil {
		return 0, wsErr("Workspace.Mode", e)
	}
	n, err := w.m.lookup(rel, true)
	if err != nil {
		return 0, wsErr("Workspace.Mode", fsError(path, err))
	}
	return n.perm, nil
}

// Symlink makes path a symbolic link to target (as `ln -s target path`).
func (w *Workspace) Symlink(target, path string) error {
	if err := w.m.symlink(target, path); err != nil {
		if we, ok := err.(*wire.WireError); ok {
			return wsErr("Workspace.Symlink", we)
		}
		return err
	}
	return nil
}

// Mkdir makes a directory and its parents.
func (w *Workspace) Mkdir(path string) error {
	_, e := w.m.mkdir(path)
	return wsErr("Workspace.Mkdir", e)
}

// Remove deletes a file, or a directory with everything in it.
func (w *Workspace) Remove(path string) error {
	_, e := w.m.remove(wire.FSPathRequest{Path: path, Recursive: true})
	return wsErr("Workspace.Remove", e)
}

// Paths lists every file, directory and link in the workspace, sorted.
func (w *Workspace) Paths() []string {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	var out []string
	_ = walkTree(".", w.m.root, func(p string, _ *node) error {
		if p != "." {
			out = append(out, p)
		}
		return nil
	})
	return out
}
