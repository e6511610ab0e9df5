package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/shell"
)

// Shells opens live bash sessions inside the sandbox. Unlike
// Commands.Run, a session keeps everything between calls — working
// directory, variables (exported or not), functions, aliases, set options
// and background jobs — like a terminal an agent drives. Each session is a
// real bash on a pty started by the sandbox's agent; see package
// sandbox/shell for the exact semantics.
type Shells struct {
	sb *Sandbox
	m  *shell.Manager

	mu       sync.Mutex
	captures map[string]*shellCapture // session id -> the output file of its command
}

// Shell is one live bash session.
type Shell struct {
	sb *Sandbox
	s  *shell.Session
}

// ShellOptions configures a new session.
type ShellOptions struct {
	// Dir is the starting directory, relative to the workspace (default:
	// the workspace).
	Dir string
	// Env adds variables (over the sandbox's environment and the
	// non-interactive defaults PAGER=cat, GIT_PAGER=cat,
	// GIT_TERMINAL_PROMPT=0, DEBIAN_FRONTEND=noninteractive).
	Env map[string]string
	// MaxOutputBytes caps the output returned per call (default 64 KiB;
	// head and tail are kept around a marker).
	MaxOutputBytes int
}

// ShellResult is what one call on a session returned and, when the
// command was run with ShellRunOptions.OutputFile, what became of that file
// so far. A command that failed is data here (ExitCode), not an error.
type ShellResult struct {
	// Output is the text printed since the previous result: escape
	// sequences removed, "\r\n" turned into "\n", invalid UTF-8 replaced
	// with U+FFFD.
	Output string
	// ExitCode is the command's exit status, nil while it runs. When the
	// session ended, it is the shell's exit status.
	ExitCode *int
	// Cwd is the shell's working directory after the command (the last one
	// known while a command runs).
	Cwd string
	// Running is true when the command has not finished: send input with
	// Input, wait with Wait, or interrupt it with Input and "C-c".
	Running bool
	// Killed is true when ShellRunOptions.KillOnTimeout had to stop the
	// command.
	Killed bool
	// Ended is true when the shell is gone (exit, set -e, killed, closed);
	// EndReason says why. Later calls fail with CodeEnded.
	Ended     bool
	EndReason string
	// Truncated is true when output was cut; DroppedBytes and DroppedLines
	// say how much, and Cut where: Output[:Cut] is the head, a one-line
	// marker follows, then the tail.
	Truncated    bool
	Cut          int
	DroppedBytes int64
	DroppedLines int64
	OutputFileInfo
}

// ShellRunOptions tunes Shell.Run.
type ShellRunOptions struct {
	// Timeout is how long to wait for the command (default
	// Limits.Timeout). A command still running then is NOT killed: the
	// result says Running, and later calls send input or wait for more.
	Timeout time.Duration
	// KillOnTimeout interrupts the command at the timeout instead
	// (Ctrl-C, then signals to the foreground process group).
	KillOnTimeout bool
	// OutputFile, when set, is a workspace path (relative to the
	// workspace, or absolute under it) where every byte of the command's
	// output is kept, as the session cleans it, whatever the result keeps
	// (results keep the head and the tail of ShellOptions.MaxOutputBytes).
	// The file is written as the output is produced, also while the
	// command runs on after Run returned, until it ends or the next Run;
	// each result reports the file so far. An existing file is replaced.
	OutputFile string
	// OutputFileLimit caps the file (0: DefaultOutputFileLimit). Bytes
	// past it are counted in OutputFileCut, not written.
	OutputFileLimit int64
}

// ShellInfo describes a session.
type ShellInfo struct {
	// ID names the session, e.g. "sh-1".
	ID string
	// Command is the running command, or the last one; Running says which.
	Command string
	Running bool
	// Ended is set once the session is gone; EndReason says why.
	Ended     bool
	EndReason string
	// Cwd is the shell's working directory, as last known.
	Cwd string
	// Opened is when the session started.
	Opened time.Time
	// Since is when Command was started.
	Since time.Time
}

func shellInfo(i shell.Info) ShellInfo {
	return ShellInfo{ID: i.ID, Command: i.Command, Running: i.Running, Ended: i.Ended,
		EndReason: i.EndReason, Cwd: i.Cwd, Opened: i.Opened, Since: i.Since}
}

func (sb *Sandbox) shellStarter() shell.Starter {
	return func(ctx context.Context, argv, env []string, dir string) (shell.PTY, error) {
		p, err := sb.startProc(ctx, "Shells.Open", argv, env, dir, true)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

func (s *Shells) manager() *shell.Manager {
	s.sb.mu.Lock()
	defer s.sb.mu.Unlock()
	if s.m == nil {
		bash := s.sb.hello.Bash
		if bash == "" {
			bash = "bash"
		}
		s.m = shell.NewManager(s.sb.shellStarter(), shell.Options{Bash: bash, Env: s.sb.env})
		m := s.m
		s.sb.closers = append(s.sb.closers, func() { _ = m.CloseAll() })
	}
	return s.m
}

// Open starts a new bash session.
func (s *Shells) Open(ctx context.Context, opts ShellOptions) (*Shell, error) {
	const op = "Shells.Open"
	start := time.Now()
	if err := s.sb.check(op); err != nil {
		return nil, err
	}
	if s.sb.hello.Bash == "" {
		return nil, newError(CodeUnavailable, op, "bash is not installed in this sandbox (not found on its PATH)")
	}
	sess, err := s.manager().Open(ctx, shell.Options{Dir: opts.Dir, Env: envList(opts.Env), MaxOutputBytes: opts.MaxOutputBytes})
	err = shellErr(op, err)
	s.sb.auditEvent(ctx, op, opts.Dir, start, err)
	if err != nil {
		return nil, err
	}
	return &Shell{sb: s.sb, s: sess}, nil
}

// Get returns an open session by id (e.g. "sh-1").
func (s *Shells) Get(id string) (*Shell, error) {
	sess, err := s.manager().Get(id)
	if err != nil {
		return nil, shellErr("Shells.Get", err)
	}
	return &Shell{sb: s.sb, s: sess}, nil
}

// List describes the sessions, open and recently ended.
func (s *Shells) List() []ShellInfo {
	var out []ShellInfo
	for _, i := range s.manager().List() {
		out = append(out, shellInfo(i))
	}
	return out
}

// Close ends a session and everything it started.
func (s *Shells) Close(id string) error { return shellErr("Shells.Close", s.manager().Close(id)) }

// ID names the session.
func (sh *Shell) ID() string { return sh.s.ID() }

// Info describes the session.
func (sh *Shell) Info() ShellInfo { return shellInfo(sh.s.Info()) }

// Run types a command into the session and waits for it to finish, up to
// the timeout. A new command while one is still running fails with
// SBX_BUSY; use Input or Wait then.
func (sh *Shell) Run(ctx context.Context, command string, opts ShellRunOptions) (ShellResult, error) {
	const op = "Shell.Run"
	start := time.Now()
	if err := sh.sb.check(op); err != nil {
		return ShellResult{}, err
	}
	timeout, err := sh.sb.timeoutFor(op, opts.Timeout)
	if err != nil {
		return ShellResult{}, err
	}
	ro := shell.RunOptions{Timeout: timeout, KillOnTimeout: opts.KillOnTimeout}
	var capture *shellCapture
	if opts.OutputFile != "" {
		capture = sh.sb.newShellCapture(ctx, opts.OutputFile, opts.OutputFileLimit)
		ro.Output = capture
	}
	sh.sb.Shells.setCapture(sh.ID(), capture)
	res, err := sh.s.Run(ctx, command, ro)
	err = shellErr(op, err)
	sh.sb.auditEvent(ctx, op, sh.ID()+": "+command, start, err)
	return sh.result(res), err
}

// result adds what became of the running command's output file so far,
// after writing out what the session handed it.
func (sh *Shell) result(r shell.Result) ShellResult {
	res := ShellResult{Output: r.Output, ExitCode: r.ExitCode, Cwd: r.Cwd, Running: r.Running,
		Killed: r.Killed, Ended: r.Ended, EndReason: r.EndReason, Truncated: r.Truncated, Cut: r.Cut,
		DroppedBytes: r.DroppedBytes, DroppedLines: r.DroppedLines}
	if c := sh.sb.Shells.capture(sh.ID()); c != nil {
		res.OutputFileInfo = c.flush()
		if !r.Running {
			sh.sb.Shells.setCapture(sh.ID(), nil)
		}
	}
	return res
}

// ShellWaitOptions tunes Shell.Input and Shell.Wait.
type ShellWaitOptions struct {
	// Timeout is how long to wait for the command to finish (default
	// Limits.Timeout, at most Limits.MaxTimeout). A command still running
	// then is not killed: the result says Running.
	Timeout time.Duration
}

// Input sends text (typed, followed by Enter) or keys such as "C-c",
// "C-d", "C-z", "Enter", "Up" to the running command, then waits for
// output up to opt.Timeout.
func (sh *Shell) Input(ctx context.Context, input string, opt ShellWaitOptions) (ShellResult, error) {
	const op = "Shell.Input"
	start := time.Now()
	if err := sh.sb.check(op); err != nil {
		return ShellResult{}, err
	}
	timeout, err := sh.sb.timeoutFor(op, opt.Timeout)
	if err != nil {
		return ShellResult{}, err
	}
	res, err := sh.s.Input(ctx, input, timeout)
	err = shellErr(op, err)
	sh.sb.auditEvent(ctx, op, sh.ID()+": "+input, start, err)
	return sh.result(res), err
}

// Wait waits up to opt.Timeout for the running command to finish,
// returning the output printed meanwhile.
func (sh *Shell) Wait(ctx context.Context, opt ShellWaitOptions) (ShellResult, error) {
	const op = "Shell.Wait"
	if err := sh.sb.check(op); err != nil {
		return ShellResult{}, err
	}
	timeout, err := sh.sb.timeoutFor(op, opt.Timeout)
	if err != nil {
		return ShellResult{}, err
	}
	res, err := sh.s.Wait(ctx, timeout)
	return sh.result(res), shellErr(op, err)
}

// Close ends the session and kills everything it started. On a sandbox
// whose agent stopped reading it returns SBX_TIMEOUT after 2 s: the
// session is closed, and the kill reaches the shell once the agent reads
// again (or the sandbox closes).
func (sh *Shell) Close() error { return shellErr("Shell.Close", sh.sb.Shells.Close(sh.ID())) }

func shellErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return wrapErr(op, err)
	}
	msg := strings.TrimPrefix(err.Error(), "shell: ")
	switch {
	case errors.Is(err, shell.ErrBusy):
		return &Error{Code: CodeBusy, Op: op, Message: msg, Err: err}
	case errors.Is(err, shell.ErrEnded):
		return &Error{Code: CodeEnded, Op: op, Message: msg, Err: err}
	case errors.Is(err, shell.ErrNotFound):
		return &Error{Code: CodeNotFound, Op: op, Message: msg, Err: err}
	case errors.Is(err, shell.ErrNotAnswering):
		return &Error{Code: CodeTimeout, Op: op, Message: msg + " (the sandbox's agent is not answering: it is stopped, frozen or hung)", Err: err}
	case errors.Is(err, shell.ErrBadInput), errors.Is(err, shell.ErrNotRunning):
		return &Error{Code: CodeInvalidArgument, Op: op, Message: msg, Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wrapErr(op, err)
	}
	return &Error{Code: CodeInternal, Op: op, Message: msg, Err: err}
}

func (s *Shells) capture(id string) *shellCapture {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.captures[id]
}

func (s *Shells) setCapture(id string, c *shellCapture) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == nil {
		delete(s.captures, id)
		return
	}
	if s.captures == nil {
		s.captures = map[string]*shellCapture{}
	}
	s.captures[id] = c
}

// shellCaptureChunk is how much output a shellCapture collects before it
// appends it to the file: a 200,000-line output (1.2 MB) costs two appends
// over the agent instead of one per terminal read.
const shellCaptureChunk = 1 << 20

// shellCapture writes a session command's whole output into a workspace
// file. The session's reader calls Write with each piece of cleaned output;
// pieces are collected and appended to the file through the agent (the
// same agent file operations as Files.Append, so the workspace's
// confinement and quota apply). Blocking the reader while an append runs
// is safe: the agent client queues the terminal's bytes independently of
// it, and its flow-control window holds the shell back meanwhile.
type shellCapture struct {
	sb    *Sandbox
	path  string
	limit int64

	mu      sync.Mutex
	buf     []byte
	written int64 // bytes in the file
	cut     int64 // bytes past the limit, counted not written
	err     error // the first failed append; nothing is written after it
}

// newShellCapture creates (or empties) the file. A file that cannot be made
// does not keep the command from running: the results say why it is missing.
func (sb *Sandbox) newShellCapture(ctx context.Context, path string, limit int64) *shellCapture {
	if limit <= 0 {
		limit = DefaultOutputFileLimit
	}
	c := &shellCapture{sb: sb, path: path, limit: limit}
	c.err = sb.Files.Write(ctx, path, nil, 0)
	return c
}

// Write keeps p (up to the limit) and appends to the file once a chunk is
// collected. It never fails: a failed append is reported by flush.
func (c *shellCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := c.limit - c.written - int64(len(c.buf)); int64(len(p)) > room || c.err != nil {
		keep := max(min(room, int64(len(p))), 0)
		if c.err != nil {
			keep = 0
		}
		c.cut += int64(len(p)) - keep
		p = p[:keep]
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= shellCaptureChunk {
		c.appendLocked()
	}
	return n, nil
}

func (c *shellCapture) appendLocked() {
	if len(c.buf) == 0 || c.err != nil {
		c.buf = c.buf[:0]
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.sb.Files.Append(ctx, c.path, c.buf); err != nil {
		c.err = err
		c.cut += int64(len(c.buf))
	} else {
		c.written += int64(len(c.buf))
	}
	c.buf = c.buf[:0]
}

// flush appends what is collected and reports the file so far.
func (c *shellCapture) flush() OutputFileInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.appendLocked()
	info := OutputFileInfo{OutputFile: c.path, OutputFileBytes: c.written, OutputFileCut: c.cut}
	if c.err != nil {
		info.OutputFileError = c.err.Error()
		var se *Error
		if errors.As(c.err, &se) {
			info.OutputFileError = se.Message // the reason, without the Go operation's name
		}
		info.OutputFileCut = 0 // not a cap: the rest of the output is simply not there
	}
	return info
}
