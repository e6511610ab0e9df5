//go:build linux

// Package linuxrunner is the agent's process runner on Linux (a
// runner.Runner for package agent/server): every command starts in its own
// process group (a pty's in its own session) with the sandbox's rlimits
// in force before it runs user code (set by the forked child itself before
// execve, start_clone.go; where that clone is not available, by prlimit
// right after the start, start_exec.go), carries a tag that finds it after
// it left its tree (tags.go), and is reaped once it exits (seen on its
// pidfd, or by the reaper: the agent may be PID 1 or a child subreaper, so
// it reaps orphans too). A timeout,
// cancel or kill reaches the whole command: its group, its descendants
// (stopped first, so none forks meanwhile) and everything carrying its tag.
//
// Descendants and StopDescendants serve backends whose sandbox shares the
// host's PID namespace (the local backend pauses and kills with them).
package linuxrunner

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
)

// Options tunes a Runner.
type Options struct {
	// Cgroup, when set, is a cgroup every command must be in before it
	// runs (the local backend's commands cgroup).
	Cgroup *Cgroup
	// Spawn, when set, runs every process start (the fork and exec of a
	// command), for tests that hold a start. An error from Spawn itself
	// means the start did not run.
	Spawn func(start func() error) error
}

// Cgroup is a cgroup v1 pids cgroup that every command must join before it
// runs, limited to Max tasks (isolate.CommandsCgroup).
type Cgroup struct {
	// Tasks is its "tasks" file, open for writing: writing "0" moves the
	// writing thread. Current is its "pids.current", open for reading.
	// Both must be close-on-exec. The runner's own clone (start_clone.go)
	// has each command's child move itself before execve and refuse to
	// run (EAGAIN, as a refused fork) if that puts the cgroup over Max.
	Tasks, Current int
	Max            int
	// Spawn runs a start on a thread that has joined the cgroup, for a
	// runner whose start runs nothing of ours in the child (os/exec:
	// start_exec.go); the processes that thread forks are born there.
	Spawn func(start func() error) error
}

// Runner is the Linux process runner of one agent.
type Runner struct {
	opts  Options
	procs *procTable
}

var _ runner.Runner = (*Runner)(nil)

// New returns a Runner; it starts nothing before Begin.
func New(opts Options) *Runner {
	return &Runner{opts: opts, procs: newProcTable()}
}

// Begin makes the agent the parent of its commands' orphans (unless it is
// PID 1, which is already) and starts the reaper; end kills what is left
// below the agent and stops the reaper.
func (r *Runner) Begin() (end func()) {
	if os.Getpid() != 1 {
		// Orphans of our commands must come back to us so that Close can
		// find and kill them (a setsid daemon leaves its process group).
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	quietSignals()
	stop := r.procs.startReaper()
	return func() {
		killDescendants(os.Getpid(), r.procs.reap)
		stop()
	}
}

// KillAll kills every process the runner started, their trees and tags,
// and every other process below the agent.
func (r *Runner) KillAll() {
	r.procs.killAll()
	killDescendants(os.Getpid(), r.procs.reap)
}

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
