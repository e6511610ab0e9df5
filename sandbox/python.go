package sandbox

import (
	"context"
	"errors"
	"path"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/pykernel"
)

// Python runs code in persistent Python contexts inside the sandbox, with
// notebook semantics: state survives between runs, the value of a final
// expression is the result, rich outputs (images, HTML, DataFrames,
// matplotlib figures) come back typed, and a timeout interrupts the code
// with KeyboardInterrupt while keeping its state. Each context is one
// long-lived python3 process running a small embedded driver (standard
// library only); see package sandbox/pykernel for the exact semantics.
type Python struct {
	sb *Sandbox
	c  *pykernel.Contexts
}

// PythonRunOptions tunes one run.
type PythonRunOptions struct {
	// Context names the context (default "default", created on first use).
	Context string
	// Timeout bounds the run (default Limits.Timeout); the code then gets
	// KeyboardInterrupt and the context keeps its state.
	Timeout time.Duration
	// Env is set for this run only.
	Env map[string]string
	// OnOutput receives stream chunks, displays and the result as they
	// arrive.
	OnOutput func(PythonOutput)
	// OutputFile, when set, is a workspace path (relative to the
	// workspace, or absolute under it) where the kernel keeps every byte
	// the run writes to stdout and stderr, in the order written, whatever
	// Limits.MaxOutputBytes keeps in the Execution (its start and its end).
	// It is written inside the sandbox as the output is produced; an
	// existing file is replaced. OutputFileLimit caps it (0:
	// DefaultOutputFileLimit); Execution.OutputFileBytes, OutputFileCut
	// and OutputFileError say what became of it.
	OutputFile      string
	OutputFileLimit int64
}

// Execution is the outcome of one Python run (see pykernel.Execution).
// An exception in the code is data (Error), not a Go error.
type Execution = pykernel.Execution

// PythonOutput is one output of a run: a stream chunk, a display or the
// result, with MIME-typed data.
type PythonOutput = pykernel.Output

// PythonContext describes a running context.
type PythonContext = pykernel.ContextInfo

// MaxPythonContexts bounds the live contexts of one sandbox (each is a
// python3 process); creating one more fails with CodeInvalidArgument and a
// message naming the existing ones.
const MaxPythonContexts = 16

func (p *Python) contexts(op string) (*pykernel.Contexts, error) {
	sb := p.sb
	if err := sb.check(op); err != nil {
		return nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if p.c != nil {
		return p.c, nil
	}
	py := sb.cfg.python
	if py == "" {
		py = sb.hello.Python
	}
	if py == "" {
		return nil, newError(CodeUnavailable, op, "python3 is not installed in this sandbox (not found on its PATH); install it in the image or set WithPython")
	}
	start := func(ctx context.Context, argv, env []string, dir string) (pykernel.Proc, error) {
		proc, err := sb.startProc(ctx, op, argv, env, dir, false)
		if err != nil {
			return nil, err
		}
		return proc, nil
	}
	p.c = pykernel.NewContexts(start, pykernel.Options{
		Python:         py,
		Env:            sb.env,
		Dir:            sb.iso.WorkspacePath,
		MaxOutputBytes: sb.cfg.limits.MaxOutputBytes,
		DefaultTimeout: sb.cfg.limits.Timeout,
	}, MaxPythonContexts)
	c := p.c
	sb.closers = append(sb.closers, func() { _ = c.Close() })
	return p.c, nil
}

// Run executes code in a context. A timeout returns the partial Execution
// (TimedOut set) together with an error matching ErrTimeout.
func (p *Python) Run(ctx context.Context, code string, opts PythonRunOptions) (*Execution, error) {
	const op = "Python.Run"
	start := time.Now()
	ex, err := p.run(ctx, code, opts)
	p.sb.auditEvent(ctx, op, contextName(opts.Context)+": "+code, start, err)
	return ex, err
}

func (p *Python) run(ctx context.Context, code string, opts PythonRunOptions) (*Execution, error) {
	const op = "Python.Run"
	c, err := p.contexts(op)
	if err != nil {
		return nil, err
	}
	timeout, err := p.sb.timeoutFor(op, opts.Timeout)
	if err != nil {
		return nil, err
	}
	ro := pykernel.RunOptions{Timeout: timeout, Env: opts.Env, OnOutput: opts.OnOutput, OutputFileLimit: opts.OutputFileLimit}
	if opts.OutputFile != "" {
		// The driver runs in the sandbox, but the code may have changed its
		// directory: it gets the path under the workspace as the sandbox
		// sees it.
		ro.OutputFile = opts.OutputFile
		if !path.IsAbs(ro.OutputFile) {
			ro.OutputFile = path.Join(p.sb.iso.WorkspacePath, ro.OutputFile)
		}
		if ro.OutputFileLimit <= 0 {
			ro.OutputFileLimit = DefaultOutputFileLimit
		}
	}
	ex, err := c.Run(ctx, opts.Context, code, ro)
	if ex != nil && opts.OutputFile != "" {
		ex.OutputFile = opts.OutputFile
	}
	if err != nil {
		return ex, p.err(op, err)
	}
	if ex != nil && ex.TimedOut {
		msg := "the code ran past its %s timeout and was interrupted (KeyboardInterrupt); the context's state was kept"
		if ex.StateLost {
			msg = "the code ran past its %s timeout and ignored the interrupt: the context was killed and restarted, and ALL ITS STATE WAS LOST"
		}
		return ex, newError(CodeTimeout, op, msg, timeout)
	}
	return ex, nil
}

func contextName(n string) string {
	if n == "" {
		return pykernel.DefaultContext
	}
	return n
}

// Create starts a new, empty context.
func (p *Python) Create(ctx context.Context, name string) error {
	c, err := p.contexts("Python.Create")
	if err != nil {
		return err
	}
	return p.err("Python.Create", c.Create(ctx, name))
}

// List describes the running contexts.
func (p *Python) List() []PythonContext {
	c, err := p.contexts("Python.List")
	if err != nil {
		return nil
	}
	return c.List()
}

// Restart replaces a context's process with a fresh one (state is lost).
func (p *Python) Restart(ctx context.Context, name string) error {
	c, err := p.contexts("Python.Restart")
	if err != nil {
		return err
	}
	return p.err("Python.Restart", c.Restart(ctx, contextName(name)))
}

// Remove stops a context and forgets it.
func (p *Python) Remove(ctx context.Context, name string) error {
	c, err := p.contexts("Python.Remove")
	if err != nil {
		return err
	}
	return p.err("Python.Remove", c.Remove(ctx, contextName(name)))
}

// err maps a kernel error to a coded one. A kernel ends with its sandbox:
// once the sandbox is closed or dead, that is what the caller is told (a
// Python call cut by the agent's death said SBX_ENDED, "call Restart",
// which cannot help).
func (p *Python) err(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pykernel.ErrDied) || errors.Is(err, pykernel.ErrClosed) {
		if serr := p.sb.check(op); serr != nil && CodeOf(serr) != CodePaused {
			return serr
		}
	}
	return pyErr(op, err)
}

func pyErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return wrapErr(op, err)
	}
	msg := strings.TrimPrefix(err.Error(), "pykernel: ")
	switch {
	case errors.Is(err, pykernel.ErrNoContext):
		return &Error{Code: CodeNotFound, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrContextExists):
		return &Error{Code: CodeExists, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrBadName), errors.Is(err, pykernel.ErrBadRequest), errors.Is(err, pykernel.ErrTooManyContexts):
		return &Error{Code: CodeInvalidArgument, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrStart):
		return &Error{Code: CodeUnavailable, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrDied), errors.Is(err, pykernel.ErrClosed):
		return &Error{Code: CodeEnded, Op: op, Message: msg, Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wrapErr(op, err)
	}
	return &Error{Code: CodeInternal, Op: op, Message: msg, Err: err}
}
