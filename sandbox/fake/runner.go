package fake

import (
	"context"
	"io"
	"net"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// scriptRunner is the agent server's process side in the fake: it starts
// no process. Each start becomes a scripted process whose standard
// streams are pipes: a command plays the reply of the script's first
// matching rule, the Python kernel and bash sessions are played by
// playKernel and playShell. Everything else (working directory checks,
// environment, output caps, timeouts, job table, signals, replies) is the
// server's own code.
type scriptRunner struct {
	fk *Fake

	mu    sync.Mutex
	procs map[*proc]bool // running
}

func newScriptRunner(fk *Fake) *scriptRunner {
	return &scriptRunner{fk: fk, procs: map[*proc]bool{}}
}

// Begin returns the end of the sandbox, which kills what is left.
func (r *scriptRunner) Begin() (end func()) { return r.KillAll }

// KillAll kills every scripted process still running.
func (r *scriptRunner) KillAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.procs {
		p.end(128+sigKILL, true) // takes no lock of the runner's
	}
}

// LookPath finds programs for the server: the fake's programs are its
// script's, not files, so every name is found, except python3 and bash
// where the fake was made WithoutPython or WithoutBash. The server asks
// with the sandbox's environment at the handshake, which the fake keeps
// for the Policy of calls that carry no environment of their own.
func (r *scriptRunner) LookPath(name string, env []string) string {
	fk := r.fk
	fk.mu.Lock()
	if fk.env == nil {
		fk.env = env
	}
	fk.mu.Unlock()
	switch {
	case name == "python3" && fk.cfg.noPython, name == "bash" && fk.cfg.noBash:
		return ""
	case strings.Contains(name, "/"):
		return name
	}
	return "/usr/bin/" + name
}

// Start answers a command from the script, or starts the kernel or a
// session player. A command no rule answers does not start: the error
// names it and the rule to add (SBX_NOT_FOUND, as a missing program).
func (r *scriptRunner) Start(spec runner.Spec) (runner.Process, error) {
	fk := r.fk
	req := spec.Request
	dir := fk.relDir(spec.Dir)
	var play func(p *proc) int
	switch {
	case isKernel(spec.Args, spec.Stdin, spec.Pty):
		play = fk.playKernel
	case isTemplate(spec.Args, spec.Stdin, spec.Pty):
		play = fk.playTemplate
	case isStub(spec.Args, spec.Pty):
		play = playStub
	case isShell(spec.Args, spec.Pty):
		play = func(p *proc) int { return fk.playShell(p, path.Join(WorkspacePath, dir)) }
	default:
		text := commandText(spec.Args)
		kind := KindCommand
		if req.Job {
			kind = KindJob
		}
		timeout := time.Duration(req.TimeoutMs) * time.Millisecond
		idx := fk.rec.add(fk.Clock, Call{Kind: kind, Op: "exec", Text: text, Args: spec.Args, Dir: req.Dir, Env: req.Env,
			Policy: fk.policy(timeout, spec.Env)})
		f, ok := find(&fk.Script.mu, fk.Script.commands, text)
		if !ok {
			msg := unscripted("command", text)
			fk.unscripted(msg)
			fk.rec.setErr(idx, string(wire.CodeNotFound))
			return nil, wire.Errorf(wire.CodeNotFound, "%s", msg)
		}
		fk.rec.markScripted(idx)
		e := Exec{Text: text, Args: spec.Args, Dir: dir, Env: req.Env, Workspace: fk.Workspace()}
		play = func(p *proc) int { return fk.playCommand(p, f, e, req.Job, timeout) }
	}
	p := newProc(fk, spec)
	p.runner = r
	r.mu.Lock()
	r.procs[p] = true
	r.mu.Unlock()
	go func() {
		code := play(p)
		p.end(code, false)
		r.mu.Lock()
		delete(r.procs, p)
		r.mu.Unlock()
	}()
	return p, nil
}

// playCommand plays a command's scripted reply: it takes the command's
// input (a job's stays open and is read as it comes), asks the rule, then
// prints the output. A Hang reply then runs until the command is
// signalled: its timeout on the fake clock, a cancellation, a kill. A
// command's own timeout moves the clock there at once (see Clock).
func (fk *Fake) playCommand(p *proc, f func(context.Context, Exec) Reply, e Exec, job bool, timeout time.Duration) int {
	ctx := p.ctx
	if p.stdin != nil {
		if job {
			go func() { _, _ = io.Copy(io.Discard, p.stdin) }()
		} else {
			e.Stdin, _ = io.ReadAll(p.stdin)
		}
	}
	if job {
		// A job's rule runs once, as it starts; the caller is not waiting.
		ctx = context.WithoutCancel(ctx)
	}
	rep := f(ctx, e)
	for _, out := range []struct {
		w io.Writer
		s string
	}{{p.stdout, rep.Stdout}, {p.stderr, rep.Stderr}} {
		if out.s == "" {
			continue // no write at all: a system call saved per stream
		}
		if _, err := io.WriteString(out.w, out.s); err != nil {
			return 128 + sigPIPE
		}
	}
	if !rep.Hang {
		return rep.ExitCode
	}
	if !job && timeout > 0 {
		done := fk.Clock.waitFor(p.start, timeout)
		defer done()
	}
	<-p.ctx.Done()
	return 0 // p.end already has the signal that ended it
}

// Signal numbers as the wire carries them (Linux's).
const (
	sigHUP  = 1
	sigINT  = 2
	sigQUIT = 3
	sigKILL = 9
	sigPIPE = 13
	sigTERM = 15
)

var signalNames = map[int]string{sigHUP: "SIGHUP", sigINT: "SIGINT", sigQUIT: "SIGQUIT", sigKILL: "SIGKILL", sigPIPE: "SIGPIPE", sigTERM: "SIGTERM"}

// proc is a scripted process: the server holds one end of each pipe, the
// player the other.
type proc struct {
	fk     *Fake
	runner *scriptRunner // the runner that started it (the template finds stand-ins there)
	pid    int
	start  time.Time
	// ctx ends when the process ends (exit or signal).
	ctx    context.Context
	cancel context.CancelFunc

	// The server's ends (runner.Process) and the player's: in-memory
	// pipes, so a scripted command costs no system call.
	srvIn          io.WriteCloser // nil without Spec.Stdin or Pty
	srvOut, srvErr runner.Output  // srvErr nil on a pty
	stdin          io.Reader
	stdout, stderr io.Writer // the same pipe on a pty
	closers        []net.Conn

	sigMu    sync.Mutex
	onSignal func(sig int, foreground bool) bool // true: the player handled it

	once   sync.Once
	done   chan struct{}
	code   int
	signal string
	ended  time.Time
}

func newProc(fk *Fake, spec runner.Spec) *proc {
	p := &proc{fk: fk, start: fk.Clock.Now(), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.pid = fk.nextPID()
	if spec.Stdin || spec.Pty {
		srv, play := net.Pipe()
		p.srvIn, p.stdin = srv, play
		p.closers = append(p.closers, play)
	}
	srv, play := net.Pipe()
	p.srvOut, p.stdout, p.stderr = srv, play, play
	p.closers = append(p.closers, play)
	if !spec.Pty {
		srv, play := net.Pipe()
		p.srvErr, p.stderr = srv, play
		p.closers = append(p.closers, play)
	}
	return p
}

// nextPID gives the next scripted process its PID.
func (fk *Fake) nextPID() int {
	fk.mu.Lock()
	defer fk.mu.Unlock()
	fk.lastPID++
	return 100 + fk.lastPID
}

// byPID returns the running scripted process pid, or nil.
func (r *scriptRunner) byPID(pid int) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.procs {
		if p.pid == pid {
			return p
		}
	}
	return nil
}

// end ends the process with code (a signal's when bySignal), once: its
// pipes close, so the server sees the end of its output.
func (p *proc) end(code int, bySignal bool) {
	p.once.Do(func() {
		p.code = code
		if bySignal {
			p.signal = signalNames[code-128]
		}
		p.ended = p.fk.Clock.Now()
		p.cancel()
		for _, f := range p.closers {
			f.Close()
		}
		close(p.done)
	})
}

func (p *proc) setSignalHandler(h func(sig int, foreground bool) bool) {
	p.sigMu.Lock()
	p.onSignal = h
	p.sigMu.Unlock()
}

// deliver acts on a signal as the scripted process would: its player's
// handler first (the kernel's SIGINT, the terminal's Ctrl-C), then the
// default action of the terminating signals; others are ignored.
func (p *proc) deliver(sig int, foreground bool) {
	p.sigMu.Lock()
	h := p.onSignal
	p.sigMu.Unlock()
	if sig != sigKILL && h != nil && h(sig, foreground) {
		return
	}
	switch sig {
	case sigHUP, sigINT, sigQUIT, sigKILL, sigTERM:
		p.end(128+sig, true)
	}
}

// The runner.Process side, as the server sees it.

func (p *proc) PID() int { return p.pid }

func (p *proc) Stdin() io.WriteCloser        { return p.srvIn }
func (p *proc) Stdout() runner.Output        { return p.srvOut }
func (p *proc) Stderr() runner.Output        { return p.srvErr }
func (p *proc) Done() <-chan struct{}        { return p.done }
func (p *proc) Signal(sr wire.SignalRequest) { p.deliver(sr.Signal, sr.Foreground) }
func (p *proc) SignalTree(sig int)           { p.deliver(sig, false) }
func (p *proc) Survivors() []int             { return nil }
func (p *proc) OutputHolders() []int         { return nil }

func (p *proc) Exit() (code int, signal string, start, end time.Time) {
	return p.code, p.signal, p.start, p.ended
}

// Terminate ends the command as one that obeys SIGTERM: at once, with
// no other process to signal.
func (p *proc) Terminate() int {
	p.deliver(sigTERM, false)
	<-p.done
	return 0
}
