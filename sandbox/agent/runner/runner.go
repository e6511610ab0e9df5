// Package runner is the seam between the agent's server (package
// agent/server), which is portable Go, and the operating system's
// processes. The server decides what runs and keeps the bookkeeping that
// the protocol promises (output caps and rings, timeouts, the end of a
// command's output, replies); a Runner starts the processes and controls
// them: process groups, rlimits, reaping, killing a command's whole tree.
//
// Implementations: package agent/linuxrunner (the real one, Linux only),
// Plain here (os/exec, for platforms where the agent runs only in tests),
// and the fake backend's scripted runner.
package runner

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Runner starts and controls the processes of one agent (one sandbox).
type Runner interface {
	// Begin is called once, after the handshake and before any Start. It
	// returns end, the last call the server makes, once its stream is
	// gone and its request handlers have returned (or were given up on):
	// end kills whatever is still left and stops the runner's background
	// work (a reaper).
	Begin() (end func())
	// KillAll kills every process the runner started and everything they
	// left behind; the server calls it when its stream is gone, before it
	// waits for its request handlers (which wait for their processes).
	KillAll()
	// Start starts one process. An error means it did not start: the
	// server replies with CodeExec and the error's text. A Spec.Rlimits
	// entry the runner cannot apply is an error (a *LimitError), never
	// ignored: a limit not in force is a control not in force.
	Start(Spec) (Process, error)
}

// Spec is one process to start.
type Spec struct {
	Path string   // the program, already resolved against the sandbox's PATH
	Args []string // argv; Args[0] as the request named the program
	Env  []string // the complete environment
	Dir  string   // absolute working directory (inside the workspace)
	// Stdin gives the process a pipe for its input (else it has none).
	Stdin bool
	// Pty runs the process on a new terminal, leading its own session;
	// Rows and Cols size it (0: 40 rows, 200 columns).
	Pty        bool
	Rows, Cols uint16
	// Rlimits are applied to the process before it can run user code.
	Rlimits []wire.Rlimit
	// HoldOutput lets the runner keep the write ends of the process's
	// stdout and stderr open in the agent until the process exits (two
	// descriptors more while it runs), so that its exit wakes the agent
	// once and not first for each pipe it closes as it exits; Stdout and
	// Stderr then end once the process has exited and no other process
	// holds them. A runner may ignore it.
	HoldOutput bool
	// Request is the exec request as the client sent it (the call's own
	// environment and directory, timeout, job or not). A runner that
	// starts real processes has what it needs above; the fake backend's
	// scripted runner records calls with it.
	Request wire.ExecRequest
}

// Process is one started process and the command it leads: its process
// group, its descendants, and whatever it started that left both.
type Process interface {
	// PID is the process's id as the sandbox sees it.
	PID() int
	// Stdin is where the process's input goes: nil without Spec.Stdin
	// or Pty, the terminal for a pty. Stdout is its output (the terminal
	// for a pty), Stderr its error output (nil for a pty). The server
	// reads, writes and closes them; Stdout and Stderr must honour read
	// deadlines (a pipe or terminal served by the runtime's poller).
	Stdin() io.WriteCloser
	Stdout() Output
	Stderr() Output
	// Done is closed when the process has exited.
	Done() <-chan struct{}
	// Exit reports, once Done is closed, the shell-style exit code (128+n
	// for signal n), the signal's name ("" if none), and when the process
	// started and ended.
	Exit() (code int, signal string, start, end time.Time)
	// Signal delivers sr: to the process, to its group (sr.Group; a
	// SIGKILL then reaches the whole command), or to the foreground group
	// of its terminal (sr.Foreground).
	Signal(sr wire.SignalRequest)
	// SignalTree signals every process of the command (a job's kill); a
	// SIGKILL is repeated until none is left.
	SignalTree(sig int)
	// Terminate ends the whole command: SIGTERM, a short grace for its
	// handlers, then SIGKILL to what is left. It returns how many
	// processes other than the process itself it signalled.
	Terminate() int
	// Survivors lists the command's processes still alive after a
	// Terminate (waiting briefly for SIGKILL to land), for the reply.
	Survivors() []int
	// OutputHolders lists processes other than the exited process that
	// still hold its Stdout or Stderr open (a daemon that kept them): the
	// server then stops waiting for the end of the output and reports
	// them as left running.
	OutputHolders() []int
}

// Looker is a Runner that finds programs itself. The server resolves
// Spec.Path, and reports where python3 and bash are, with LookPath when
// its runner has it (the fake backend's programs are its script's, not
// files), and on the sandbox's PATH in its file system otherwise.
type Looker interface {
	// LookPath returns the program name resolves to on the PATH of env,
	// "" when there is none.
	LookPath(name string, env []string) string
}

// Output is a process's output as the server reads it: a pipe or a
// terminal (an *os.File the runtime's poller serves), or the fake
// backend's in-memory pipe. A read deadline ends a read that waits (the
// server stops reading a command's output with it).
type Output interface {
	io.ReadCloser
	SetReadDeadline(t time.Time) error
}

// LimitError is a Start that failed because a resource limit could not be
// applied to the process (which does not run).
type LimitError struct {
	Name string // the limit, e.g. "RLIMIT_CPU"
	Err  error
}

// Error names the limit and the cause.
func (e *LimitError) Error() string { return fmt.Sprintf("cannot apply %s: %v", e.Name, e.Err) }

// Unwrap returns the cause.
func (e *LimitError) Unwrap() error { return e.Err }

// ProcessLimitError is a Start refused because the sandbox's commands
// already run as many processes as its process limit allows (Limits.Pids):
// the process does not run. Err is the refusal as the kernel would report
// a refused fork (EAGAIN), so errors.Is(err, syscall.EAGAIN) holds.
type ProcessLimitError struct {
	Max int // the limit; 0 when the runner does not know it
	Err error
}

// Error names the limit and the cause.
func (e *ProcessLimitError) Error() string {
	return fmt.Sprintf("the process limit (%d) is reached: %v", e.Max, e.Err)
}

// Unwrap returns the cause.
func (e *ProcessLimitError) Unwrap() error { return e.Err }

// ErrUnsupported is returned by a runner for a Spec it cannot honour on
// this platform (a pty, say).
var ErrUnsupported = errors.New("not supported by this platform's process runner")
