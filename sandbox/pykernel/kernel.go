package pykernel

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// Proc is a started driver process as the kernel needs it. The sandbox
// implements it over its in-sandbox agent; ExecProc implements it over
// os/exec for tests and for running on the host.
//
// After Kill and Wait have returned, reads from Stdout must return an error
// (io.EOF) and writes to Stdin must fail, so that no goroutine of the kernel
// stays blocked on a dead process.
//
// A Proc that also has a method PID() int, returning its process id as
// processes beside it see it, can host contexts forked from a template
// (Options.Imports with Contexts; see the package documentation).
type Proc interface {
	// Stdin is the driver's stdin (protocol in).
	Stdin() io.Writer
	// Stdout is the driver's stdout (protocol out); it returns io.EOF when
	// the process is gone.
	Stdout() io.Reader
	// Signal signals the driver (SIGINT for interrupts). It should reach
	// the driver's process group, as Jupyter does, so that a child process
	// the code is waiting for (os.system, subprocess) is interrupted too.
	Signal(sig syscall.Signal) error
	// Kill sends SIGKILL to the driver and everything it started. An error
	// means the kill was not sent; the kernel tries again while the
	// process's end is not reported.
	Kill() error
	// Wait waits for the driver to exit and returns its exit code. It may be
	// called more than once and returns the same result each time. A Proc
	// whose end is not reported within 2 s of Kill (its host stopped
	// answering) is given up: the run returns, the context loses its
	// state, and Wait, Stdout and Stdin are left to end in the background.
	Wait() (exitCode int, err error)
}

// Starter starts a driver process: argv[0] is the interpreter (looked up on
// PATH), env the complete environment ("KEY=VALUE"; nothing is inherited),
// dir the working directory. ctx bounds the start only, not the process's
// life.
type Starter func(ctx context.Context, argv []string, env []string, dir string) (Proc, error)

// Options configure a Kernel. The zero value works; see each field for its default.
type Options struct {
	// Python is the interpreter to run (>= 3.8). Default "python3".
	Python string
	// Env is the driver process's whole environment ("KEY=VALUE"). Nothing
	// of the host is inherited; pass PATH if shell lines should find programs.
	Env []string
	// Dir is the working directory of the code (the workspace).
	Dir string
	// MaxOutputBytes bounds stdout+stderr kept per run; more is dropped and
	// counted, and a marker is appended. Default 1 MiB.
	MaxOutputBytes int
	// MaxDisplayBytes bounds the rich outputs (display data, figures, the
	// result) kept per run. Default 32 MiB.
	MaxDisplayBytes int
	// InterruptGrace is how long code may take to stop after the interrupt
	// before the process is killed and restarted. Default 2 s.
	InterruptGrace time.Duration
	// DefaultTimeout applies to runs whose RunOptions.Timeout is zero:
	// nothing runs without a time limit. Default 60 s.
	DefaultTimeout time.Duration
	// StartTimeout bounds starting a process (also the automatic restart
	// after a kill). Default 30 s.
	StartTimeout time.Duration
	// Imports are modules (e.g. "numpy", "pandas") every context starts
	// with, imported and bound in its namespace as `import numpy, pandas`
	// binds them. Contexts imports them once, in a template interpreter,
	// and forks each context from it (see Template in the package
	// documentation); a Kernel started with Start imports them itself.
	// A module that fails to import fails the start with ErrImport.
	Imports []string
}

func (o Options) withDefaults() Options {
	if o.Python == "" {
		o.Python = "python3"
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = 1 << 20
	}
	if o.MaxDisplayBytes <= 0 {
		o.MaxDisplayBytes = 32 << 20
	}
	if o.InterruptGrace <= 0 {
		o.InterruptGrace = 2 * time.Second
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 60 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	return o
}

// lineCap is the longest protocol line accepted: room for the display budget
// in base64 plus escaped text; the driver's own limits keep it far below.
func (o Options) lineCap() int {
	return 2*o.MaxDisplayBytes + 8*o.MaxOutputBytes + 1<<20
}

// RunOptions configure one Run.
type RunOptions struct {
	// Timeout is the run's time limit; zero means Options.DefaultTimeout.
	// When it expires the code gets KeyboardInterrupt.
	Timeout time.Duration
	// Env is set in os.environ for this run only and restored afterwards
	// (also for keys the code changed itself).
	Env map[string]string
	// OutputFile, when set, is a path (absolute, or relative to the
	// driver's starting directory) where the driver keeps every byte the
	// run writes to stdout and stderr, in the order written, whatever the
	// Execution keeps; parent directories are made and an existing file is
	// replaced. OutputFileLimit caps it (0: 64 MiB); see
	// Execution.OutputFileBytes.
	OutputFile      string
	OutputFileLimit int64
	// OnOutput, if set, is called for every stream chunk, display output and
	// the result as they arrive, on the goroutine that called Run (so it must
	// not call this Kernel). Chunks are cut wherever the writes were: a
	// print() may arrive as several. It sees exactly what the Execution keeps,
	// including the truncation marker and the kernel's own notices.
	OnOutput func(Output)
}

// Info describes the running interpreter of a Kernel.
type Info struct {
	// PID is the driver's process id (as the process sees it).
	PID int
	// Version is the Python version, e.g. "3.11.2".
	Version string
	// Executable is sys.executable.
	Executable string
}

// Errors returned by the kernel; match them with errors.Is.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("pykernel: kernel is closed")
	// ErrDied means the Python process exited on its own (os._exit, a crash,
	// the OOM killer). Call Restart to get a fresh process.
	ErrDied = errors.New("pykernel: the Python process died")
	// ErrStart means the Python process could not be started or did not
	// come up (missing interpreter, Python < 3.8, a start timeout).
	ErrStart = errors.New("pykernel: could not start Python")
	// ErrBadRequest means the arguments of Run were unusable (e.g. an env
	// key with '='); nothing was run.
	ErrBadRequest = errors.New("pykernel: bad request")
	// ErrProtocol means the driver did not understand a request (the code
	// may have read from the driver's private stdin).
	ErrProtocol = errors.New("pykernel: protocol error")
	// ErrImport means a module of Options.Imports could not be imported;
	// the error's text names it and says why.
	ErrImport = errors.New("pykernel: an import of Options.Imports failed")
)

//go:embed driver.py
var driverSource string

// bootstrap is what `python -c` runs: it checks the version (in syntax any
// Python parses), routes early errors to stdout where Go sees them, then
// reads the driver's source from stdin, length-prefixed, with unbuffered
// reads so that no protocol byte after it is swallowed. No file is written
// in the sandbox.
const bootstrap = `import sys,os
os.dup2(1,2)
if sys.version_info<(3,8):
 os.write(1,('{"t":"fatal","msg":"sandboxkit needs Python >= 3.8; %s is %s"}\n'%(sys.executable,sys.version.split()[0])).encode());sys.exit(3)
def _r(n):
 b=b''
 while len(b)<n:
  c=os.read(0,n-len(b))
  if not c:sys.exit(3)
  b+=c
 return b
exec(compile(_r(int(_r(8))),'<sandboxkit-driver>','exec'))
`

// Kernel is one Python context: a long-lived driver process whose globals
// persist across runs. Runs are serialized; all methods are safe for
// concurrent use.
type Kernel struct {
	launch launcher
	opts   Options
	sem    chan struct{} // one run (or restart) at a time

	mu     sync.Mutex
	p      *process // nil when dead or closed
	dead   error    // why p is nil, when not closed
	closed bool
	count  int
	info   Info
}

// Start starts a kernel context: the interpreter is started with start and
// the driver is sent to it. ctx bounds the start only.
func Start(ctx context.Context, start Starter, opts Options) (*Kernel, error) {
	if start == nil {
		return nil, fmt.Errorf("%w: nil Starter", ErrStart)
	}
	opts = opts.withDefaults()
	return startKernel(ctx, func(ctx context.Context) (*process, Info, error) {
		return startProcess(ctx, start, opts)
	}, opts)
}

// launcher starts a driver process that is ready to run: afresh
// (startProcess) or forked from a template (template.fork).
type launcher func(ctx context.Context) (*process, Info, error)

func startKernel(ctx context.Context, launch launcher, opts Options) (*Kernel, error) {
	k := &Kernel{launch: launch, opts: opts, sem: make(chan struct{}, 1)}
	p, info, err := launch(ctx)
	if err != nil {
		return nil, err
	}
	k.p, k.info = p, info
	return k, nil
}

// ExecutionCount returns the count of the last run (0 before the first). It
// rises by one for every run, also across the automatic restart after a kill;
// Restart starts it again at 0, as Jupyter does.
func (k *Kernel) ExecutionCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.count
}

// Info describes the current interpreter process.
func (k *Kernel) Info() Info {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.info
}

// Restart replaces the Python process with a fresh one: all state is lost
// and the execution count starts again at 0. It waits for a running Run to
// end. It also revives a kernel whose process died.
func (k *Kernel) Restart(ctx context.Context) error {
	if err := k.acquire(ctx); err != nil {
		return err
	}
	defer k.release()
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return ErrClosed
	}
	old := k.p
	k.p = nil
	k.mu.Unlock()
	if old != nil {
		old.teardown()
	}
	p, info, err := k.launch(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.dead = err
		return err
	}
	if k.closed {
		go p.teardown()
		return ErrClosed
	}
	k.p, k.info, k.count, k.dead = p, info, 0, nil
	return nil
}

// Close kills the Python process. A Run in progress returns ErrClosed.
func (k *Kernel) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	p := k.p
	k.p = nil
	k.mu.Unlock()
	if p != nil {
		p.teardown()
	}
	return nil
}

func (k *Kernel) acquire(ctx context.Context) error {
	select {
	case k.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *Kernel) release() { <-k.sem }

// request is the JSON form of a run request (see driver.py).
type request struct {
	Op      string            `json:"op"`
	N       int               `json:"n"`
	Code    string            `json:"code"`
	Env     map[string]string `json:"env,omitempty"`
	Max     int               `json:"max"`
	MaxDisp int               `json:"maxd"`
	// OutputFile and OutputFileLimit: RunOptions'.
	OutputFile      string `json:"of,omitempty"`
	OutputFileLimit int64  `json:"ofmax,omitempty"`
}

func validateEnv(env map[string]string) error {
	for key, v := range env {
		if key == "" || strings.ContainsAny(key, "=\x00") {
			return fmt.Errorf("%w: env key %q: must be non-empty without '=' or NUL", ErrBadRequest, key)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: env value of %q contains NUL", ErrBadRequest, key)
		}
	}
	return nil
}

// Run executes code in the context and returns what it produced. Every run
// that reaches the process takes the next execution count, also when it fails. Exceptions
// in the code, timeouts and SystemExit are data in the Execution, not
// errors. The error is non-nil when the kernel could not run the code
// (ErrClosed, ErrDied, ErrBadRequest, ErrProtocol), or when ctx was cancelled:
// then the code was interrupted as for a timeout and the partial Execution
// is returned together with ctx's error.
func (k *Kernel) Run(ctx context.Context, code string, ro RunOptions) (*Execution, error) {
	if err := validateEnv(ro.Env); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := k.acquire(ctx); err != nil {
		return nil, err
	}
	defer k.release()
	k.mu.Lock()
	p, closed, dead := k.p, k.closed, k.dead
	if p != nil {
		k.count++
	}
	count := k.count
	k.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case p == nil:
		return nil, fmt.Errorf("%w (%v); call Restart", ErrDied, dead)
	}
	timeout := ro.Timeout
	if timeout <= 0 {
		timeout = k.opts.DefaultTimeout
	}
	r := &runState{
		k: k, p: p, ro: ro,
		ex:    &Execution{Count: count, OutputFile: ro.OutputFile},
		began: time.Now(),
	}
	return r.loop(ctx, request{Op: "run", N: count, Code: code, Env: ro.Env,
		Max: k.opts.MaxOutputBytes, MaxDisp: k.opts.MaxDisplayBytes, OutputFile: ro.OutputFile, OutputFileLimit: ro.OutputFileLimit}, timeout)
}

// runState is one Run in progress.
type runState struct {
	k       *Kernel
	p       *process
	ro      RunOptions
	ex      *Execution
	began   time.Time
	out     [2]streamBuf    // stdout, stderr
	marked  [2]int64        // bytes of each stream a marker in place already accounts for
	used    int             // stream bytes kept
	dispUse int             // display bytes kept
	tlKind  OutputKind      // stream whose text tlText merges for the Timeline
	tlText  strings.Builder // consecutive chunks of that stream
	ctxErr  error           // why the caller cancelled, if it did
}

func (r *runState) loop(ctx context.Context, req request, timeout time.Duration) (*Execution, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	werr := r.p.write(append(line, '\n'))
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var grace <-chan time.Time
	var graceTimer *time.Timer
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	ctxDone := ctx.Done()
	interrupt := func(why string) {
		if grace != nil {
			return // already interrupted once; the grace period runs
		}
		r.notice(why)
		if err := r.p.proc.Signal(syscall.SIGINT); err != nil {
			r.notice(fmt.Sprintf("[sandboxkit: could not deliver the interrupt: %v]\n", err))
		}
		graceTimer = time.NewTimer(r.k.opts.InterruptGrace)
		grace = graceTimer.C
	}
	for {
		select {
		case m, ok := <-r.p.msgs:
			if !ok {
				return r.died(nil)
			}
			if done := r.handle(m); done != nil {
				return done()
			}
		case err := <-werr:
			werr = nil
			if err != nil {
				return r.died(err)
			}
		case <-deadline.C:
			r.ex.TimedOut = true
			interrupt(fmt.Sprintf("[sandboxkit: timed out after %v; the code was interrupted (KeyboardInterrupt)]\n", timeout))
		case <-ctxDone:
			ctxDone = nil
			r.ctxErr = ctx.Err()
			deadline.Stop()
			r.ex.Interrupted = true
			interrupt("[sandboxkit: cancelled; the code was interrupted (KeyboardInterrupt)]\n")
		case <-grace:
			return r.killAndRestart(ctx)
		}
	}
}

// handle applies one message; it returns a non-nil finisher when the run is over.
func (r *runState) handle(m message) func() (*Execution, error) {
	switch m.kind {
	case msgOut:
		i, kind := 0, Stdout
		if m.stream == "stderr" {
			i, kind = 1, Stderr
		}
		text := m.text
		if room := r.k.opts.MaxOutputBytes - r.used; len(text) > room {
			cut := room
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			r.out[i].dropped += int64(len(text) - cut)
			text = text[:cut]
		}
		if text == "" {
			return nil
		}
		r.used += len(text)
		r.out[i].b.WriteString(text)
		r.emit(Output{Kind: kind, Text: text})
	case msgCut:
		i := 0
		if m.stream == "stderr" {
			i = 1
		}
		o := m.cut
		r.marked[i] = o.Bytes
		r.ex.DroppedLines += o.Lines
		marker := omissionMarker(o, r.k.opts.MaxOutputBytes)
		r.out[i].b.WriteString(marker) // not counted in used: the budget is for output
		r.emit(Output{Kind: Omitted, Text: marker, Omission: &o})
	case msgDisplay, msgResult:
		size := 0
		for _, v := range m.data {
			size += len(v)
		}
		if r.dispUse+size > r.k.opts.MaxDisplayBytes {
			r.ex.DroppedOutputs++
			return nil
		}
		r.dispUse += size
		o := Output{Kind: Display, Data: m.data}
		if m.kind == msgResult {
			o.Kind = Result
			r.ex.Result = &o
		} else {
			r.ex.Outputs = append(r.ex.Outputs, o)
		}
		r.emit(o)
	case msgError:
		r.ex.Error = m.err
	case msgDone:
		if m.done.count != r.ex.Count {
			return nil // not ours (forged by code writing to the protocol fd)
		}
		r.out[0].dropped += m.done.droppedOut
		r.out[1].dropped += m.done.droppedErr
		r.ex.DroppedOutputs += m.done.droppedDsp
		r.ex.Exited = m.done.status == "exit"
		if r.ex.OutputFile != "" {
			r.ex.OutputFileBytes, r.ex.OutputFileCut, r.ex.OutputFileError = m.done.fileBytes, m.done.fileCut, m.done.fileError
		}
		return r.finish
	case msgBad:
		return func() (*Execution, error) {
			r.collect()
			return r.ex, fmt.Errorf("%w: the driver rejected the request: %s", ErrProtocol, m.note)
		}
	case kindTooLong:
		r.ex.DroppedOutputs++
	}
	return nil
}

func (r *runState) emit(o Output) {
	if o.Kind == Stdout || o.Kind == Stderr {
		if o.Kind != r.tlKind {
			r.flushTimeline()
			r.tlKind = o.Kind
		}
		r.tlText.WriteString(o.Text)
	} else {
		r.flushTimeline()
		r.ex.Timeline = append(r.ex.Timeline, o)
	}
	if r.ro.OnOutput != nil {
		r.ro.OnOutput(o)
	}
}

// flushTimeline ends the stream text being merged into the Timeline.
func (r *runState) flushTimeline() {
	if r.tlText.Len() > 0 {
		r.ex.Timeline = append(r.ex.Timeline, Output{Kind: r.tlKind, Text: r.tlText.String()})
		r.tlText.Reset()
	}
	r.tlKind = ""
}

// notice adds a line of ours to stderr, so that a reader of the output (often
// a model) sees plainly what the kernel did.
func (r *runState) notice(text string) {
	r.out[1].b.WriteString(text)
	r.emit(Output{Kind: Stderr, Text: text})
}

// collect moves the stream buffers into the Execution, with markers.
func (r *runState) collect() {
	for i := range r.out {
		d := r.out[i].dropped
		r.ex.DroppedBytes += d
		if d -= r.marked[i]; d > 0 {
			marker := truncationMarker(d, r.k.opts.MaxOutputBytes)
			r.out[i].b.WriteString(marker)
			kind := Stdout
			if i == 1 {
				kind = Stderr
			}
			r.emit(Output{Kind: kind, Text: marker})
		}
	}
	r.flushTimeline()
	r.ex.Stdout, r.ex.Stderr = r.out[0].b.String(), r.out[1].b.String()
	r.ex.Duration = time.Since(r.began)
}

func (r *runState) finish() (*Execution, error) {
	r.collect()
	if r.ex.Interrupted {
		return r.ex, fmt.Errorf("pykernel: run interrupted: %w", r.ctxErr)
	}
	return r.ex, nil
}

// died handles the process exiting on its own during a run, or a request
// that could not be written to it (cause: the write's error, else nil).
// When the Proc does not report the process's end either (teardown gave
// it up: the sandbox's agent reads nothing), the kernel is left without a
// process and says so; the next run of a Contexts starts a fresh one.
func (r *runState) died(cause error) (*Execution, error) {
	ended := r.p.teardown()
	code := -1
	if ended {
		code, _ = r.p.wait()
	}
	k := r.k
	k.mu.Lock()
	closed := k.closed
	if k.p == r.p {
		k.p = nil
		k.dead = fmt.Errorf("exit code %d during run %d", code, r.ex.Count)
		if !ended {
			k.dead = fmt.Errorf("the process could not be reached during run %d and was given up", r.ex.Count)
		}
	}
	k.mu.Unlock()
	if closed {
		r.collect()
		return r.ex, ErrClosed
	}
	r.ex.StateLost = true
	if !ended {
		why := "its output stopped"
		if cause != nil {
			why = "the code could not be sent to it: " + cause.Error()
		}
		r.notice(fmt.Sprintf("[sandboxkit: the Python process could not be reached (%s); it was killed, and its end was not "+
			"confirmed within %v: its state is lost, and the next run starts a fresh process]\n", why, killGrace))
		r.collect()
		if cause != nil {
			return r.ex, fmt.Errorf("%w: the process could not be reached during run %d; the next run starts a fresh one: %w", ErrDied, r.ex.Count, cause)
		}
		return r.ex, fmt.Errorf("%w: the process could not be reached during run %d; the next run starts a fresh one", ErrDied, r.ex.Count)
	}
	r.notice(fmt.Sprintf("[sandboxkit: the Python process died (exit code %d); its state is lost]\n", code))
	r.collect()
	return r.ex, fmt.Errorf("%w: exit code %d during run %d; call Restart", ErrDied, code, r.ex.Count)
}

// killAndRestart handles code that did not stop after the interrupt. When
// the killed process's end is not reported within killGrace (the sandbox's
// agent reads nothing), no new process is started now: that start would
// wait for the same agent, up to StartTimeout (30 s), past the caller's
// deadline. The kernel is left without a process instead, and the next
// run of a Contexts starts a fresh one (a Kernel's own Run says to call
// Restart).
func (r *runState) killAndRestart(ctx context.Context) (*Execution, error) {
	ended := r.p.teardown()
	r.ex.StateLost = true
	if !ended {
		k := r.k
		k.mu.Lock()
		if k.p == r.p {
			k.p = nil
			k.dead = fmt.Errorf("the process was killed during run %d and its end was not confirmed", r.ex.Count)
		}
		closed := k.closed
		k.mu.Unlock()
		r.notice(fmt.Sprintf("[sandboxkit: the code did not stop within %v of the interrupt, and the Python process did not "+
			"confirm its end within %v of being killed (the sandbox is not answering): the process was given up, its state is "+
			"lost (all variables and imports of this context are gone), and the next run starts a fresh process]\n", k.opts.InterruptGrace, killGrace))
		r.collect()
		if closed {
			return r.ex, ErrClosed
		}
		if r.ex.Interrupted {
			return r.ex, fmt.Errorf("pykernel: run interrupted: %w", r.ctxErr)
		}
		return r.ex, nil
	}
	r.notice(fmt.Sprintf("[sandboxkit: the code did not stop within %v of the interrupt; the Python process "+
		"was killed and restarted: state lost (all variables and imports of this context are gone)]\n", r.k.opts.InterruptGrace))
	r.collect()
	k := r.k
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.opts.StartTimeout)
	defer cancel()
	p, info, err := k.launch(sctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		if p != nil {
			go p.teardown()
		}
		return r.ex, ErrClosed
	}
	if err != nil {
		k.p, k.dead = nil, err
		return r.ex, fmt.Errorf("pykernel: restart after kill failed: %w", err)
	}
	k.p, k.info = p, info
	if r.ex.Interrupted {
		return r.ex, fmt.Errorf("pykernel: run interrupted: %w", r.ctxErr)
	}
	return r.ex, nil
}
