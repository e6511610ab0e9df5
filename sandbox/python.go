package sandbox

import (
	"context"
	"errors"
	"path"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
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

// Execution is the outcome of one Python run. An exception in the code is
// data (Error), not a Go error.
//
// When the code calls sys.exit(), exit() or raises SystemExit, the context
// survives: Error is set with Name "SystemExit" and Value the exit argument
// as str() shows it ("" for sys.exit(), "3" for sys.exit(3)), and Exited is
// true. A timeout or cancellation interrupts the code with KeyboardInterrupt:
// Error then is that KeyboardInterrupt (its traceback shows where the code
// was) and TimedOut or Interrupted is set. If the code did not stop within
// the grace period, the process was killed and a fresh one started:
// StateLost is true and every variable, import and file handle of the
// context is gone. When the sandbox's agent stopped reading (a stopped,
// frozen or hostile agent), a run returns at its deadline plus the 2 s
// interrupt grace plus 2 s for the kill to be confirmed (up to 2 s more
// when the stream is still taken by a given-up request; measured: 4 to
// 6 s past a 2 s deadline), with StateLost and SBX_TIMEOUT; the killed
// process is given up, the kill is sent again until it reaches the agent,
// and the context's next run starts a fresh process.
type Execution struct {
	// Count is this run's execution count in the context: 1, 2, 3, ...
	Count int
	// Stdout and Stderr are everything written to fds 1 and 2 during the
	// run, by Python code and by child processes, cut at
	// Limits.MaxOutputBytes (the start and the end are kept).
	Stdout, Stderr string
	// Result is the value of a final expression statement; nil when the
	// code ends in a statement, in an expression followed by ';', or in
	// None.
	Result *PythonOutput
	// Outputs are the Display outputs in the order they were produced.
	Outputs []PythonOutput
	// Timeline is everything the run produced in the order it was
	// produced: stream text (consecutive chunks of one stream merged),
	// displays, the result, the kernel's notices and omission markers, as
	// Jupyter shows a cell's output. It holds what Stdout, Stderr, Outputs
	// and Result hold, interleaved.
	Timeline []PythonOutput
	// Error is the exception the code raised, or nil.
	Error *PythonException
	// Exited is set when the code raised SystemExit (see above).
	Exited bool
	// TimedOut is set when the run's timeout expired and the code was
	// interrupted.
	TimedOut bool
	// Interrupted is set when the caller's context was cancelled during
	// the run.
	Interrupted bool
	// StateLost is set when the Python process was killed (the code
	// ignored the interrupt, or the process died) and the context now runs
	// in a fresh process with no state.
	StateLost bool
	// DroppedBytes counts output bytes cut beyond Limits.MaxOutputBytes: a
	// stream keeps its start and its end, and a marker line where its
	// middle was left out says how much (the Timeline has a PythonOmitted
	// output there). DroppedLines counts the newlines among them.
	DroppedBytes int64
	DroppedLines int64
	// OutputFile is PythonRunOptions.OutputFile when one was asked for:
	// the file holds OutputFileBytes bytes of the run's output (both
	// streams, in the order written); OutputFileCut bytes were past
	// PythonRunOptions.OutputFileLimit or after a failed write, and
	// OutputFileError says why a write failed.
	OutputFile      string
	OutputFileBytes int64
	OutputFileCut   int64
	OutputFileError string
	// DroppedOutputs counts Display outputs (or a Result) dropped because
	// they were too large to return.
	DroppedOutputs int
	// Duration is the wall time of the run as seen from Go.
	Duration time.Duration
}

// OK reports whether the code ran to the end without an exception, a
// timeout or a lost state.
func (e *Execution) OK() bool {
	return e.Error == nil && !e.TimedOut && !e.Interrupted && !e.StateLost
}

// PythonException is an exception raised by the code (or by the repr of
// its result). It is data about the code, not a failure of the sandbox.
type PythonException struct {
	// Name is the exception class name, e.g. "ZeroDivisionError".
	Name string
	// Value is str() of the exception, e.g. "division by zero".
	Value string
	// Traceback is the traceback as Python prints it, one line per
	// element, showing only the user's own frames (cells are named
	// "<cell N>"). For a SyntaxError it holds the offending line and the
	// caret.
	Traceback []string
}

// Error formats the exception the way Python's last traceback line does.
func (e *PythonException) Error() string {
	if e.Value == "" {
		return e.Name
	}
	return e.Name + ": " + e.Value
}

// PythonOutputKind says what a PythonOutput is.
type PythonOutputKind string

// The kinds of PythonOutput.
const (
	// PythonStdout is a chunk of standard output (Text), streamed as written.
	PythonStdout PythonOutputKind = "stdout"
	// PythonStderr is a chunk of standard error (Text), streamed as written.
	PythonStderr PythonOutputKind = "stderr"
	// PythonDisplay is rich output from display(obj) or a matplotlib
	// figure (Data).
	PythonDisplay PythonOutputKind = "display"
	// PythonResult is the value of the code's final expression (Data).
	PythonResult PythonOutputKind = "result"
	// PythonOmitted marks where the middle of a long stream was left out
	// (Omission says which stream and how much); the stream's text after
	// it is its end. It appears in Execution.Timeline and OnOutput.
	PythonOmitted PythonOutputKind = "omitted"
)

// Common MIME types in PythonOutput.Data.
const (
	MIMEText     = "text/plain"
	MIMEHTML     = "text/html"
	MIMEMarkdown = "text/markdown"
	MIMELaTeX    = "text/latex"
	MIMEJSON     = "application/json"
	MIMEPNG      = "image/png"
	MIMEJPEG     = "image/jpeg"
	MIMESVG      = "image/svg+xml"
)

// PythonOutput is one output of a run: a stream chunk, a display or the
// result, with MIME-typed data.
type PythonOutput struct {
	// Kind says which of the fields below is set.
	Kind PythonOutputKind
	// Text is the chunk of a PythonStdout or PythonStderr output.
	Text string
	// Data maps MIME type to content for PythonDisplay and PythonResult
	// outputs. It always holds MIMEText (the repr). Images (MIMEPNG,
	// MIMEJPEG) are raw bytes, not base64; MIMEJSON is JSON text; the
	// others are UTF-8 text.
	Data map[string][]byte
	// Omission is set for a PythonOmitted output.
	Omission *PythonOmission
}

// Plain returns the text/plain form of a display or result output, or the
// Text of a stream chunk.
func (o PythonOutput) Plain() string {
	if o.Kind == PythonStdout || o.Kind == PythonStderr {
		return o.Text
	}
	return string(o.Data[MIMEText])
}

// PythonOmission is what a PythonOmitted output left out.
type PythonOmission struct {
	// Stream is PythonStdout or PythonStderr.
	Stream PythonOutputKind
	// Bytes counts the bytes left out, Lines the newlines among them.
	Bytes, Lines int64
}

// PythonContext describes a running context.
type PythonContext struct {
	// Name is the context's name ("default" unless one was given).
	Name string
	// ExecutionCount is the count of its last run.
	ExecutionCount int
	// PID is the interpreter's process id, as the sandbox sees it.
	PID int
	// Version is the Python version, e.g. "3.11.2".
	Version string
	// Executable is the interpreter's path (sys.executable).
	Executable string
}

// The conversions below keep package pykernel's types out of the API:
// a reader of this package's documentation needs no other package.

func pythonOutput(o pykernel.Output) PythonOutput {
	out := PythonOutput{Kind: PythonOutputKind(o.Kind), Text: o.Text, Data: o.Data}
	if o.Omission != nil {
		out.Omission = &PythonOmission{Stream: PythonOutputKind(o.Omission.Stream), Bytes: o.Omission.Bytes, Lines: o.Omission.Lines}
	}
	return out
}

func pythonOutputs(os []pykernel.Output) []PythonOutput {
	if os == nil {
		return nil
	}
	out := make([]PythonOutput, len(os))
	for i, o := range os {
		out[i] = pythonOutput(o)
	}
	return out
}

func execution(ex *pykernel.Execution) *Execution {
	if ex == nil {
		return nil
	}
	out := &Execution{
		Count: ex.Count, Stdout: ex.Stdout, Stderr: ex.Stderr,
		Outputs: pythonOutputs(ex.Outputs), Timeline: pythonOutputs(ex.Timeline),
		Exited: ex.Exited, TimedOut: ex.TimedOut, Interrupted: ex.Interrupted, StateLost: ex.StateLost,
		DroppedBytes: ex.DroppedBytes, DroppedLines: ex.DroppedLines,
		OutputFile: ex.OutputFile, OutputFileBytes: ex.OutputFileBytes, OutputFileCut: ex.OutputFileCut, OutputFileError: ex.OutputFileError,
		DroppedOutputs: ex.DroppedOutputs, Duration: ex.Duration,
	}
	if ex.Result != nil {
		r := pythonOutput(*ex.Result)
		out.Result = &r
	}
	if ex.Error != nil {
		out.Error = &PythonException{Name: ex.Error.Name, Value: ex.Error.Value, Traceback: ex.Error.Traceback}
	}
	return out
}

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
	if sb.closed {
		return nil, newError(CodeClosed, op, "the sandbox is closed") // Close has run the closers
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
		Imports:        sb.cfg.pyImports,
	}, MaxPythonContexts)
	c := p.c
	sb.closers = append(sb.closers, func() { _ = c.Close() })
	return p.c, nil
}

// preload starts the template of WithPythonImports in the background. Its
// error is not kept: the first Python call that needs a context starts the
// template again and reports the error then, with its code.
func (p *Python) preload() {
	c, err := p.contexts("Python")
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.Preload(ctx) // Close cancels it
	}()
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
	ro := pykernel.RunOptions{Timeout: timeout, Env: opts.Env, OutputFileLimit: opts.OutputFileLimit}
	if on := opts.OnOutput; on != nil {
		ro.OnOutput = func(o pykernel.Output) { on(pythonOutput(o)) }
	}
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
	kex, err := c.Run(ctx, opts.Context, code, ro)
	ex := execution(kex)
	if ex != nil && opts.OutputFile != "" {
		ex.OutputFile = opts.OutputFile
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && ex == nil && errors.Is(err, pykernel.ErrStart) {
			// Starting the context's process (the restart of one that was
			// given up, when the sandbox did not answer) ran into the
			// caller's deadline: that is the caller's timeout, not a
			// missing Python.
			return nil, &Error{Code: CodeOf(wrapErr(op, cerr)), Op: op, Err: err,
				Message: "the caller's context ended while the Python context's process was starting: " + strings.TrimPrefix(err.Error(), "pykernel: ")}
		}
		return ex, p.err(op, err)
	}
	if ex != nil && ex.TimedOut {
		msg := "the code ran past its %s timeout and was interrupted (KeyboardInterrupt); the context's state was kept"
		if ex.StateLost {
			msg = "the code ran past its %s timeout and ignored the interrupt (or the sandbox did not answer): the context's process was killed and ALL ITS STATE WAS LOST; the context runs on in a fresh process"
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

// List describes the running contexts, sorted by name. It fails when the
// sandbox is closed or has no python3.
func (p *Python) List(ctx context.Context) ([]PythonContext, error) {
	c, err := p.contexts("Python.List")
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, wrapErr("Python.List", err)
	}
	var out []PythonContext
	for _, k := range c.List() {
		out = append(out, PythonContext{Name: k.Name, ExecutionCount: k.ExecutionCount,
			PID: k.Python.PID, Version: k.Python.Version, Executable: k.Python.Executable})
	}
	return out, nil
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
	case errors.Is(err, agent.ErrStalled):
		// The code could not be sent: the agent reads nothing (the kernel's
		// message says what became of the context).
		return &Error{Code: CodeTimeout, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrNoContext):
		return &Error{Code: CodeNotFound, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrContextExists):
		return &Error{Code: CodeExists, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrBadName), errors.Is(err, pykernel.ErrBadRequest), errors.Is(err, pykernel.ErrTooManyContexts):
		return &Error{Code: CodeInvalidArgument, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrImport):
		msg = strings.TrimPrefix(err.Error(), pykernel.ErrImport.Error()+": ")
		return &Error{Code: CodeUnavailable, Op: op, Err: err, Message: "the Python context could not start: every context first imports " +
			"the sandbox's Python imports, and " + msg + "; install the module in the sandbox, or create the sandbox without it " +
			"(WithPythonImports, PoolConfig.PythonImports)"}
	case errors.Is(err, pykernel.ErrStart):
		return &Error{Code: CodeUnavailable, Op: op, Message: msg, Err: err}
	case errors.Is(err, pykernel.ErrDied), errors.Is(err, pykernel.ErrClosed):
		return &Error{Code: CodeEnded, Op: op, Message: msg, Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wrapErr(op, err)
	}
	return &Error{Code: CodeInternal, Op: op, Message: msg, Err: err}
}
