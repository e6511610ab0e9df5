// Package shell runs live bash sessions that a program (typically an LLM
// agent) drives like a terminal: each Run returns the command's output as
// plain text, its exit status, the working directory after it and whether it
// is still running, while everything the shell remembers (cwd, variables,
// functions, aliases, set options, background jobs) carries over to the next
// call.
//
// The package knows nothing about sandboxes: it is handed a Starter that
// starts a process on a pseudo-terminal (inside a sandbox, through its
// agent; on this machine, LocalStarter) and speaks to bash only through that
// terminal.
//
// How it stays robust. bash runs interactive (for job control and Ctrl-C /
// Ctrl-Z), without rc files, readline, prompts, history or terminal echo.
// Each command is typed as one line that prints a start marker, evals the
// command (given as one ANSI-C quoted word, so no input can leave bash on a
// continuation prompt), then prints an end marker with $? and $PWD. Markers
// carry a random per-session token and are never present in our typed input
// in printable form, so neither echo nor user output can fake one. A
// PROMPT_COMMAND hook, exported together with its functions, completes lines
// that bash abandoned (a foreground job killed by Ctrl-C) and sets up a new
// bash after `exec bash`. Nothing depends on PS1, so users may set PS1 and
// PROMPT_COMMAND as they like (the hook is put back in front of PROMPT_COMMAND
// after each command if the user removed it).
//
// Threat model. The shell and whatever runs in it are untrusted and may
// print anything: output is parsed by a bounded state machine, memory for
// output is bounded per command (head and tail kept), reads never block a
// caller (one reader goroutine per session feeds a bounded buffer), and every
// call has a timeout. A process inside can forge markers only by learning the
// session's token (it is visible to the shell, e.g. in `declare -f`); the
// worst it can do with it is end its own command's result early. Isolation
// is the Starter's job, not this package's.
//
// Known limits: under `set -x` each command's trace starts with a
// `+ builtin eval '<command>'` line; output printed while no command runs
// (background jobs between calls) is dropped; `env` shows the exported hook
// (PROMPT_COMMAND and three BASH_FUNC___sbk<token>_* functions); a line of
// typed input longer than 4095 bytes is cut by the terminal's line
// discipline (commands are not: they are sent in pieces); if the user
// redirects the shell's own stdout (`exec >file`), calls only time out.
package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PTY is a started process attached to a pseudo-terminal.
//
// Implementations must let Read and Write run concurrently with each other
// and with the other methods. If the PTY also implements io.Closer, the
// session calls Close once the shell is gone and output is drained (or on
// Session.Close), to release the terminal.
type PTY interface {
	Write(p []byte) (int, error)               // bytes typed into the terminal (master side)
	Read(p []byte) (int, error)                // terminal output (master side); io.EOF once the process is gone and output drained
	SignalForeground(sig syscall.Signal) error // signal the terminal's foreground process group
	Kill() error                               // SIGKILL the whole session (everything it started); an error means it was not sent (Close tries again)
	Wait() (exitCode int, err error)
}

// Starter starts argv with exactly the environment env in directory dir
// (empty: the starter's default) on a new pseudo-terminal, as the leader of a
// new session with the terminal as its controlling terminal.
type Starter func(ctx context.Context, argv []string, env []string, dir string) (PTY, error)

// Errors returned by sessions. They are wrapped with a message that says
// what to do next; test with errors.Is.
var (
	// ErrEnded: the shell has exited or the session was closed.
	ErrEnded = errors.New("shell: session has ended")
	// ErrBusy: a command is still running, so a new one cannot start.
	ErrBusy = errors.New("shell: a command is still running")
	// ErrNotRunning: input was sent while no command was running.
	ErrNotRunning = errors.New("shell: no command is running")
	// ErrBadInput: the command or input cannot be sent as given.
	ErrBadInput = errors.New("shell: bad input")
	// ErrNotAnswering: Close killed the shell, but the PTY did not report
	// its end in time (what runs it stopped answering); the session is
	// closed all the same.
	ErrNotAnswering = errors.New("shell: the terminal is not answering")
)

// Defaults used when the corresponding field is zero.
const (
	DefaultBash           = "bash"
	DefaultMaxOutputBytes = 64 << 10
	DefaultTimeout        = 30 * time.Second
	DefaultStartTimeout   = 10 * time.Second
	DefaultSettle         = 300 * time.Millisecond
)

// DefaultEnv holds the variables every session gets unless Options.Env sets
// them: programs that would page or ask questions do neither, and TERM=dumb
// keeps colour and cursor codes to a minimum.
var DefaultEnv = []string{
	"PAGER=cat",
	"GIT_PAGER=cat",
	"GIT_TERMINAL_PROMPT=0",
	"DEBIAN_FRONTEND=noninteractive",
	"TERM=dumb",
}

// Options configures a session.
type Options struct {
	// Bash is the bash executable (default "bash", found on the PATH).
	Bash string
	// Env is the shell's environment, as KEY=value entries. Nothing is
	// inherited from the calling process; DefaultEnv fills in what Env lacks.
	Env []string
	// Dir is the starting working directory (default: the Starter's).
	Dir string
	// MaxOutputBytes bounds the output one result returns; beyond it the
	// middle is cut and replaced with a marker line (default 64 KiB).
	MaxOutputBytes int
	// StartTimeout bounds how long Open waits for bash to be ready
	// (default 10 s).
	StartTimeout time.Duration
	// Settle is how long new output that ends in what looks like a prompt
	// (a short unfinished line ending in one of ` :>?#$])`, such as
	// "Name: " or ">>> ") must stay quiet before Run, Input or Wait returns
	// early with the command still running, so the caller can answer it
	// (default 300 ms; negative: never return early).
	Settle time.Duration
}

// RunOptions configures one Run.
type RunOptions struct {
	// Timeout is how long Run waits for the command (default 30 s). A command
	// still running then keeps running: the result has Running set.
	Timeout time.Duration
	// KillOnTimeout stops a command still running at the timeout instead: it
	// types Ctrl-C, then signals the terminal's foreground process group with
	// SIGINT, SIGTERM and SIGKILL, waiting briefly after each step. If the
	// foreground is bash itself (a loop of builtins ignoring SIGINT), the last
	// step ends the session.
	KillOnTimeout bool
	// Output, when set, receives every byte of the command's output as it
	// is produced (cleaned as in Result.Output, before any cut), from the
	// session's reader goroutine, until the command ends or the next Run:
	// also what it prints after Run returned while it was still running.
	// The caller keeps the whole output there while results stay bounded
	// by MaxOutputBytes. Write must not call back into the session; a
	// write error is the writer's to report (the session ignores it).
	Output io.Writer
}

// Result is what a call observed.
type Result struct {
	// Output is the text printed since the previous result: escape sequences
	// removed, "\r\n" turned into "\n", invalid UTF-8 replaced with U+FFFD.
	Output string
	// ExitCode is the command's exit status, nil while it runs. When the
	// session ended, it is the shell's exit status.
	ExitCode *int
	// Cwd is the shell's working directory after the command (the last one
	// known while a command runs).
	Cwd string
	// Running is true when the command has not finished: send input with
	// Input, wait with Wait, or interrupt it with Input(ctx, "C-c", ...).
	Running bool
	// Killed is true when KillOnTimeout had to stop the command.
	Killed bool
	// Ended is true when the shell is gone (exit, set -e, killed, closed);
	// EndReason says why. Later calls fail with ErrEnded.
	Ended     bool
	EndReason string
	// Truncated is true when output was cut; DroppedBytes and DroppedLines
	// say how much, and Cut where: Output[:Cut] is the head, a one-line
	// marker follows, then the tail.
	Truncated    bool
	Cut          int
	DroppedBytes int64
	DroppedLines int64
}

// Session is one live bash. Its methods are safe for concurrent use; calls
// that wait (Run, Input, Type, Wait) are served one at a time, and Close
// interrupts a waiting call.
type Session struct {
	id     string
	proto  protocol
	pty    PTY
	opts   Options
	opened time.Time

	call sync.Mutex // serialises Run, Input, Type and Wait

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever the state below changes
	raw     []byte        // bytes held back: possibly the start of a marker
	clean   Cleaner
	out     *outputBuffer
	capture io.Writer // RunOptions.Output of the command running
	outSeq  uint64    // counts writes to out, to notice new output
	lastOut time.Time
	lineLen int  // bytes of output since the last newline
	prompt  bool // the output ends in what looks like a prompt

	ready      bool   // the first init marker arrived
	pending    bool   // a command was typed and has not finished
	started    bool   // its start marker arrived: output now belongs to it
	command    string // the pending or last command
	cmdStart   time.Time
	lastStatus int
	cwd        string

	ended      bool
	endReason  string
	endCode    int
	endShown   bool // a result has reported the end
	closed     bool
	done       chan struct{} // closed when ended
	readerDone chan struct{}
	waiterDone chan struct{}
	writes     sync.WaitGroup
}

// Open starts bash through start and waits until it is ready.
func Open(ctx context.Context, start Starter, opts Options) (*Session, error) {
	return open(ctx, start, opts, "")
}

func open(ctx context.Context, start Starter, opts Options, id string) (*Session, error) {
	if start == nil {
		return nil, fmt.Errorf("%w: no Starter given", ErrBadInput)
	}
	if opts.Bash == "" {
		opts.Bash = DefaultBash
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	opts.MaxOutputBytes = max(opts.MaxOutputBytes, 256)
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultSettle
	}
	s := &Session{
		proto:      newProtocol(),
		opts:       opts,
		opened:     time.Now(),
		changed:    make(chan struct{}),
		out:        newOutputBuffer(opts.MaxOutputBytes),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		waiterDone: make(chan struct{}),
	}
	s.id = id
	if s.id == "" {
		s.id = "sh-" + s.proto.token[:8]
	}
	argv := []string{opts.Bash, "--norc", "--noprofile", "--noediting", "-i"}
	p, err := start(ctx, argv, mergeEnv(DefaultEnv, opts.Env), opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("shell: starting %s: %w", opts.Bash, err)
	}
	s.pty = p
	go s.readLoop()
	go s.waitLoop()

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := s.write(ctx, []byte(s.proto.bootstrap())); err != nil {
		s.Close()
		return nil, fmt.Errorf("shell: setting up bash: %w", err)
	}
	for {
		s.mu.Lock()
		ready, ended, reason, ch := s.ready, s.ended, s.endReason, s.changed
		s.mu.Unlock()
		if ready {
			return s, nil
		}
		if ended {
			s.Close()
			return nil, fmt.Errorf("shell: bash exited during start-up (%s); is %q a working bash?", reason, opts.Bash)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			s.Close()
			return nil, fmt.Errorf("shell: bash was not ready within %v: %w", opts.StartTimeout, ctx.Err())
		}
	}
}

// mergeEnv returns defaults overridden by env (a later entry wins).
func mergeEnv(defaults, env []string) []string {
	out := make([]string, 0, len(defaults)+len(env))
	idx := map[string]int{}
	for _, kv := range slices.Concat(defaults, env) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// ID names the session.
func (s *Session) ID() string { return s.id }

// Info is a snapshot of a session, for listings.
type Info struct {
	ID string
	// Command is the running command, or the last one; Running says which.
	Command string
	Running bool
	Ended   bool
	// EndReason says why the session ended.
	EndReason string
	Cwd       string
	Opened    time.Time
	// Since is when Command was started.
	Since time.Time
}

// Info describes the session's current state.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Info{ID: s.id, Command: s.command, Running: s.pending && !s.ended, Ended: s.ended,
		EndReason: s.endReason, Cwd: s.cwd, Opened: s.opened, Since: s.cmdStart}
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Run types command into the shell and waits for it to finish, for the
// timeout, or for a program to show a prompt (see Options.Settle). The
// command may be anything bash accepts at a prompt, over several lines.
// A command that is still running is left running unless
// opts.KillOnTimeout is set. The exit status of a failed command is data
// in the Result, not an error; errors are ErrEnded, ErrBusy, ErrBadInput,
// or the context's error (the command keeps running).
func (s *Session) Run(ctx context.Context, command string, opts RunOptions) (Result, error) {
	s.call.Lock()
	defer s.call.Unlock()
	if strings.IndexByte(command, 0) >= 0 {
		return Result{}, fmt.Errorf("%w: the command contains a NUL byte, which bash cannot receive", ErrBadInput)
	}
	s.mu.Lock()
	if err := s.endedErrLocked(); err != nil {
		s.mu.Unlock()
		return Result{}, err
	}
	if s.pending {
		err := fmt.Errorf("%w in session %s (%q, for %v): send input or keys (\"C-c\" to interrupt) with Input, wait for it with Wait, or open another session",
			ErrBusy, s.id, abbreviate(s.command), time.Since(s.cmdStart).Round(time.Second))
		s.mu.Unlock()
		return Result{}, err
	}
	line := s.proto.commandLines(command, s.lastStatus)
	s.pending, s.started = true, false
	s.command, s.cmdStart = command, time.Now()
	s.out.reset()
	s.capture = opts.Output
	s.lineLen, s.prompt = 0, false
	s.clean = Cleaner{}
	s.mu.Unlock()

	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.write(ctx, []byte(line)); err != nil {
		return s.failedWrite(err)
	}
	res, err := s.await(ctx)
	if res.Running && opts.KillOnTimeout && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		killed, err := s.stop()
		killed.Output = res.Output + killed.Output
		return killed, err
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		err = nil // our own timeout: the result says Running
	}
	return res, err
}

// Input types input into the running command and returns what it printed
// in reply: the call returns when the command finishes, when it shows a
// prompt again (see Options.Settle), or at the timeout (zero:
// DefaultTimeout).
//
// input is either a key sequence (see ParseKeys: "C-c", "C-d", "C-z",
// "Enter", "Up Enter", ...) or text, which is typed followed by Enter unless
// it already ends with a newline. Use Type to send text exactly as given.
func (s *Session) Input(ctx context.Context, input string, timeout time.Duration) (Result, error) {
	data, ok := ParseKeys(input)
	if !ok {
		data = []byte(input)
		if !strings.HasSuffix(input, "\n") && !strings.HasSuffix(input, "\r") {
			data = append(data, '\r')
		}
	}
	return s.send(ctx, data, timeout)
}

// Type is Input without key names and without the added Enter: the bytes
// of text are typed as they are.
func (s *Session) Type(ctx context.Context, text string, timeout time.Duration) (Result, error) {
	return s.send(ctx, []byte(text), timeout)
}

func (s *Session) send(ctx context.Context, data []byte, timeout time.Duration) (Result, error) {
	s.call.Lock()
	defer s.call.Unlock()
	s.mu.Lock()
	if err := s.endedErrLocked(); err != nil {
		s.mu.Unlock()
		return Result{}, err
	}
	if !s.pending {
		s.mu.Unlock()
		return Result{}, fmt.Errorf("%w in session %s, so there is nothing to type into; start one with Run", ErrNotRunning, s.id)
	}
	if len(data) == 0 {
		s.mu.Unlock()
		return Result{}, fmt.Errorf("%w: empty input; give text or a key such as \"Enter\" or \"C-c\"", ErrBadInput)
	}
	s.mu.Unlock()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.write(ctx, data); err != nil {
		return s.failedWrite(err)
	}
	res, err := s.await(ctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		err = nil
	}
	return res, err
}

// Wait waits for the running command to finish, to show a prompt, or for
// the timeout (zero: DefaultTimeout), and returns the output printed since
// the previous result. With no command running it returns at once.
func (s *Session) Wait(ctx context.Context, timeout time.Duration) (Result, error) {
	s.call.Lock()
	defer s.call.Unlock()
	s.mu.Lock()
	if s.ended && s.endShown {
		err := s.endedErrLocked()
		s.mu.Unlock()
		return Result{}, err
	}
	s.mu.Unlock()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := s.await(ctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		err = nil
	}
	return res, err
}

// Close kills the shell and everything it started, and releases the
// terminal. It is safe to call more than once. When the PTY does not report
// the shell's end within 2 s of the kill (whatever runs it stopped
// answering), Close returns ErrNotAnswering: the session is closed, and the
// rest ends in the background when the PTY does.
func (s *Session) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if !s.ended {
			s.endReason = "the session was closed"
		}
	}
	s.mu.Unlock()
	err := s.pty.Kill()
	gone := make(chan struct{})
	go func() {
		<-s.waiterDone
		s.writes.Wait()
		close(gone)
	}()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-gone:
		return err
	case <-t.C:
	}
	// The PTY does not report the shell's end: whatever runs it stopped
	// answering (a sandbox's agent that reads nothing: SIGSTOP, frozen,
	// hostile). Close used to wait for that end for good. The session is
	// closed for its callers now; its goroutines end when the PTY does
	// (when its sandbox closes, at the latest), and a kill that could not
	// be sent is sent again until then, so that the shell dies once the
	// agent reads again.
	go func() {
		for kerr := err; kerr != nil; kerr = s.pty.Kill() {
			select {
			case <-gone:
				return
			case <-time.After(closeGrace):
			}
		}
	}()
	return fmt.Errorf("%w: session %s is closed and its shell was killed, but its end was not confirmed within %v", ErrNotAnswering, s.id, closeGrace)
}

// closeGrace bounds how long Close waits for the shell's end after the
// kill. A killed shell ends within milliseconds where its PTY answers
// (SIGKILL cannot be caught); 2 s is ample under load and is the grace the
// sandbox's agent client gives a cancelled call.
const closeGrace = 2 * time.Second

// await waits until the command finishes, the session ends, ctx is done, or
// new output ends in a prompt and stays quiet for Options.Settle, then
// returns the result.
func (s *Session) await(ctx context.Context) (Result, error) {
	s.mu.Lock()
	seq0 := s.outSeq
	s.mu.Unlock()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		if s.ended || !s.pending {
			res := s.resultLocked()
			s.mu.Unlock()
			return res, nil
		}
		var settleIn time.Duration = -1
		if s.opts.Settle >= 0 && s.outSeq != seq0 && s.prompt {
			settleIn = s.opts.Settle - time.Since(s.lastOut)
			if settleIn <= 0 {
				res := s.resultLocked()
				s.mu.Unlock()
				return res, nil
			}
		}
		ch := s.changed
		s.mu.Unlock()
		var tc <-chan time.Time
		if settleIn > 0 {
			if timer == nil {
				timer = time.NewTimer(settleIn)
			} else {
				timer.Reset(settleIn)
			}
			tc = timer.C
		}
		select {
		case <-ch:
		case <-tc:
		case <-ctx.Done():
			s.mu.Lock()
			res := s.resultLocked()
			s.mu.Unlock()
			return res, ctx.Err()
		}
	}
}

// stop escalates until the running command is gone (RunOptions.KillOnTimeout).
func (s *Session) stop() (Result, error) {
	steps := []struct {
		do    func() error
		grace time.Duration
	}{
		{func() error { return s.write(context.Background(), []byte{0x03}) }, time.Second},
		{func() error { return s.pty.SignalForeground(syscall.SIGINT) }, 500 * time.Millisecond},
		{func() error { return s.pty.SignalForeground(syscall.SIGTERM) }, 500 * time.Millisecond},
		{func() error { return s.pty.SignalForeground(syscall.SIGKILL) }, time.Second},
	}
	for _, step := range steps {
		s.mu.Lock()
		gone := s.ended || !s.pending
		s.mu.Unlock()
		if gone {
			break
		}
		_ = step.do()
		ctx, cancel := context.WithTimeout(context.Background(), step.grace)
		_, _ = s.awaitDone(ctx)
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.resultLocked()
	res.Killed = true
	return res, nil
}

// awaitDone waits for the command to finish or the session to end.
func (s *Session) awaitDone(ctx context.Context) (bool, error) {
	for {
		s.mu.Lock()
		gone, ch := s.ended || !s.pending, s.changed
		s.mu.Unlock()
		if gone {
			return true, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// resultLocked builds a result and hands over the buffered output.
func (s *Session) resultLocked() Result {
	r := Result{Cwd: s.cwd}
	r.Output, r.Cut, r.DroppedBytes, r.DroppedLines = s.out.take()
	r.Truncated = r.DroppedBytes > 0
	switch {
	case s.ended:
		code := s.endCode
		r.ExitCode, r.Ended, r.EndReason = &code, true, s.endReason+"; open a new session to continue"
		s.endShown = true
	case s.pending:
		r.Running = true
	default:
		code := s.lastStatus
		r.ExitCode = &code
	}
	return r
}

func (s *Session) endedErrLocked() error {
	if !s.ended && !s.closed {
		return nil
	}
	reason := s.endReason
	if reason == "" {
		reason = "the session was closed"
	}
	return fmt.Errorf("%w: session %s: %s; open a new session to continue", ErrEnded, s.id, reason)
}

// failedWrite reports a write that did not go through.
func (s *Session) failedWrite(err error) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return s.resultLocked(), nil
	}
	return Result{Running: s.pending, Cwd: s.cwd},
		fmt.Errorf("shell: session %s is not accepting input (%v); the program may not be reading: try Input with \"C-c\", or close the session", s.id, err)
}

// write types p, giving up when ctx is done. A write the terminal does not
// accept (its input buffer is full) stays pending in the background until
// the program reads or the session is closed.
func (s *Session) write(ctx context.Context, p []byte) error {
	errc := make(chan error, 1)
	s.writes.Add(1)
	go func() {
		defer s.writes.Done()
		for len(p) > 0 {
			n, err := s.pty.Write(p)
			if err != nil {
				errc <- err
				return
			}
			p = p[n:]
		}
		errc <- nil
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return ErrEnded
	}
}

// readLoop moves terminal output into the session until the terminal closes.
func (s *Session) readLoop() {
	defer close(s.readerDone)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.pty.Read(buf)
		if n > 0 {
			s.feed(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// waitLoop notices the shell's exit, kills what it left behind (so the
// terminal closes and the reader drains), and ends the session.
func (s *Session) waitLoop() {
	defer close(s.waiterDone)
	code, err := s.pty.Wait()
	_ = s.pty.Kill()
	select {
	case <-s.readerDone:
	case <-time.After(2 * time.Second):
		// Something outside the session still holds the terminal open.
	}
	if c, ok := s.pty.(io.Closer); ok {
		_ = c.Close()
	}
	select {
	case <-s.readerDone:
	case <-time.After(2 * time.Second):
		// The PTY cannot be closed and its Read does not return: give up on
		// the rest of the output rather than hang.
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		s.flushOutputLocked()
	}
	s.ended = true
	s.endCode = code
	switch {
	case s.closed && s.endReason != "":
	case err != nil:
		s.endReason = fmt.Sprintf("waiting for the shell failed: %v", err)
	case code > 128:
		s.endReason = fmt.Sprintf("the shell was killed by signal %d", code-128)
	default:
		s.endReason = fmt.Sprintf("the shell exited with code %d", code)
	}
	s.pending, s.started = false, false
	close(s.done)
	s.broadcastLocked()
}

// feed parses a chunk of terminal output: markers change the state, other
// bytes are output of the running command or noise.
func (s *Session) feed(chunk []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data := chunk
	if len(s.raw) > 0 {
		data = append(s.raw, chunk...)
		s.raw = nil
	}
	prefix := s.proto.prefix
	changed := false
	for len(data) > 0 {
		i := indexMarker(data, prefix)
		if i < 0 {
			keep := partialPrefix(data, prefix)
			changed = s.sinkLocked(data[:len(data)-keep]) || changed
			if keep > 0 {
				s.raw = append([]byte(nil), data[len(data)-keep:]...)
			}
			break
		}
		changed = s.sinkLocked(data[:i]) || changed
		end := indexByteFrom(data, i+len(prefix), 0x07)
		if end < 0 {
			if len(data)-i > 4096 {
				// Not one of ours after all; let it through as output.
				changed = s.sinkLocked(data[i:i+1]) || changed
				data = data[i+1:]
				continue
			}
			s.raw = append([]byte(nil), data[i:]...)
			break
		}
		if m, ok := parseMarker(data[i+len(prefix) : end]); ok {
			s.markerLocked(m)
			changed = true
		}
		data = data[end+1:]
	}
	if changed {
		s.broadcastLocked()
	}
}

func indexMarker(data, prefix []byte) int {
	return strings.Index(string(data), string(prefix))
}

func indexByteFrom(data []byte, from int, c byte) int {
	if from > len(data) {
		return -1
	}
	if j := strings.IndexByte(string(data[from:]), c); j >= 0 {
		return from + j
	}
	return -1
}

// partialPrefix returns the length of the longest suffix of data that is a
// proper prefix of prefix: bytes that may be a marker cut by a read.
func partialPrefix(data, prefix []byte) int {
	for n := min(len(prefix)-1, len(data)); n > 0; n-- {
		if string(data[len(data)-n:]) == string(prefix[:n]) {
			return n
		}
	}
	return 0
}

// sinkLocked stores output of the running command; anything printed
// outside a command (prompts, echo of our lines, job notices) is dropped.
func (s *Session) sinkLocked(p []byte) bool {
	if len(p) == 0 || !s.started {
		return false
	}
	var tmp [4096]byte
	text := s.clean.Append(tmp[:0], p)
	if len(text) == 0 {
		return false
	}
	s.writeOutLocked(text)
	return true
}

func (s *Session) writeOutLocked(text []byte) {
	s.out.write(text)
	if s.capture != nil {
		_, _ = s.capture.Write(text)
	}
	s.outSeq++
	s.lastOut = time.Now()
	if i := bytes.LastIndexByte(text, '\n'); i >= 0 {
		s.lineLen = len(text) - i - 1
	} else {
		s.lineLen += len(text)
	}
	s.prompt = s.lineLen > 0 && s.lineLen <= maxPromptLen && strings.IndexByte(promptEnds, text[len(text)-1]) >= 0
}

// A program waiting for input usually shows a short unfinished line ending
// in one of promptEnds ("Name: ", ">>> ", "[y/N] ", "Password:"). Requiring
// that, rather than any unfinished line, keeps output cut mid-line by a slow
// writer from being taken for a prompt.
const (
	promptEnds   = " :>?#$])"
	maxPromptLen = 512
)

func (s *Session) flushOutputLocked() {
	if text := s.clean.Flush(nil); len(text) > 0 {
		s.writeOutLocked(text)
	}
}

func (s *Session) markerLocked(m marker) {
	if m.kind != kindStart && m.cwd != "" {
		s.cwd = m.cwd
	}
	switch m.kind {
	case kindInit:
		s.ready = true
		if s.pending && s.started { // a new bash replaced the one running the command
			s.finishLocked(m.status)
		}
	case kindStart:
		if s.pending && !s.started {
			s.started = true
			s.clean = Cleaner{}
		}
	case kindEnd, kindPrompt:
		// A prompt marker before the start marker belongs to the prompt
		// printed before our line was read; after it, bash abandoned the line.
		if s.pending && s.started {
			s.finishLocked(m.status)
		}
	}
}

func (s *Session) finishLocked(status int) {
	s.flushOutputLocked()
	s.pending, s.started = false, false
	s.lastStatus = status
}

func (s *Session) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func abbreviate(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 80 {
		s = s[:77] + "…"
	}
	return s
}
