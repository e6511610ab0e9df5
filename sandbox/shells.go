package sandbox

import (
	"context"
	"errors"
	"strings"
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

// ShellResult is what one call on a session returned.
type ShellResult = shell.Result

// ShellRunOptions tunes Shell.Run.
type ShellRunOptions struct {
	// Timeout is how long to wait for the command (default
	// Limits.Timeout). A command still running then is NOT killed: the
	// result says Running, and later calls send input or wait for more.
	Timeout time.Duration
	// KillOnTimeout interrupts the command at the timeout instead
	// (Ctrl-C, then signals to the foreground process group).
	KillOnTimeout bool
}

// ShellInfo describes a session.
type ShellInfo = shell.Info

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
func (s *Shells) List() []ShellInfo { return s.manager().List() }

// Close ends a session and everything it started.
func (s *Shells) Close(id string) error { return shellErr("Shells.Close", s.manager().Close(id)) }

// ID names the session.
func (sh *Shell) ID() string { return sh.s.ID() }

// Info describes the session.
func (sh *Shell) Info() ShellInfo { return sh.s.Info() }

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
	res, err := sh.s.Run(ctx, command, shell.RunOptions{Timeout: timeout, KillOnTimeout: opts.KillOnTimeout})
	err = shellErr(op, err)
	sh.sb.auditEvent(ctx, op, sh.ID()+": "+command, start, err)
	return res, err
}

// Input sends text (typed, followed by Enter) or keys such as "C-c",
// "C-d", "C-z", "Enter", "Up" to the running command, then waits for
// output up to timeout.
func (sh *Shell) Input(ctx context.Context, input string, timeout time.Duration) (ShellResult, error) {
	const op = "Shell.Input"
	start := time.Now()
	if err := sh.sb.check(op); err != nil {
		return ShellResult{}, err
	}
	timeout, err := sh.sb.timeoutFor(op, timeout)
	if err != nil {
		return ShellResult{}, err
	}
	res, err := sh.s.Input(ctx, input, timeout)
	err = shellErr(op, err)
	sh.sb.auditEvent(ctx, op, sh.ID()+": "+input, start, err)
	return res, err
}

// Wait waits up to timeout for more output from the running command.
func (sh *Shell) Wait(ctx context.Context, timeout time.Duration) (ShellResult, error) {
	const op = "Shell.Wait"
	if err := sh.sb.check(op); err != nil {
		return ShellResult{}, err
	}
	timeout, err := sh.sb.timeoutFor(op, timeout)
	if err != nil {
		return ShellResult{}, err
	}
	res, err := sh.s.Wait(ctx, timeout)
	return res, shellErr(op, err)
}

// Close ends the session and kills everything it started.
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
	case errors.Is(err, shell.ErrBadInput), errors.Is(err, shell.ErrNotRunning):
		return &Error{Code: CodeInvalidArgument, Op: op, Message: msg, Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wrapErr(op, err)
	}
	return &Error{Code: CodeInternal, Op: op, Message: msg, Err: err}
}
