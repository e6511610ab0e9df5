package fake

import (
	"slices"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
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
	// Time is when the call reached the fake, on its Clock.
	Time time.Time
}

// recorder keeps every call.
type recorder struct {
	mu    sync.Mutex
	calls []Call
}

func (r *recorder) add(clock *Clock, c Call) int {
	c.Time = clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
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
