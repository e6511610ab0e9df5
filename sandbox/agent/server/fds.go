package server

import (
	"sync"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// fdBudget bounds the file descriptors the agent's running commands and
// jobs hold (the read ends of their pipes, the stdin write end, an output
// file), so that hundreds of commands at once degrade with a coded BUSY
// error instead of running the agent out of descriptors. Issue 17 saw
// ~450 concurrent commands in one sandbox fail with "too many open files"
// (the local backend's agent runs under RLIMIT_NOFILE 1024), and the
// agent's own file requests and process starts fail the same way at that
// point. A reserve stays free for those: the descriptors a start uses
// only while it runs (the child's pipe ends, exec's status pipe; starts
// are serialised), file and search requests, the stream itself.
type fdBudget struct {
	mu      sync.Mutex
	used    int // descriptors held by running commands
	running int // commands holding them
	max     int
	nofile  uint64
	starts  chan struct{} // a slot per start under way (startSlots)
}

func newFDBudget() *fdBudget {
	nofile := min(fdLimit(), 1<<20)
	reserve := 64 + int(nofile)/8 + startSlots*startFDs
	return &fdBudget{max: max(int(nofile)-reserve, 8), nofile: nofile, starts: make(chan struct{}, startSlots)}
}

// fdsFor is what a running command holds: the read ends of stdout and
// stderr (one pty master instead), the write end of stdin when it is
// open, its output file, and the pidfd the Linux runner sees its exit on
// (start_clone.go in package linuxrunner).
func fdsFor(a wire.ExecRequest) int {
	n := 3
	if a.Pty {
		n = 2
	} else if a.Stdin {
		n++
	}
	if a.OutputFile != "" {
		n++
	}
	return n
}

// startFDs is what a command holds in addition while it starts: the
// child's ends of its pipes (or the pty's terminal), /dev/null for its
// stdin, and exec's status pipe. Requests make their pipes before they
// wait for their turn to fork, so hundreds of starts at once would hold
// these together (700 concurrent starts ran the agent out of descriptors
// before most had forked): startSlots starts at a time make their pipes,
// the others wait for a turn, which comes within a fork's time.
const (
	startFDs   = 6
	startSlots = 16
)

// A command may also have the runner keep its output pipes' write ends
// open in the agent until its process exits (runner.Spec.HoldOutput: the
// exit then wakes the agent once, not once per pipe first), two
// descriptors more, while fewer than holdMaxRunning commands run: a
// crowded agent keeps every descriptor for commands (200 concurrent
// commands fit in the local agent's budget at 3 each, not at 5).
const (
	holdOutputFDs  = 2
	holdMaxRunning = 8
)

// fdLease is one command's share of the budget.
type fdLease struct {
	b        *fdBudget
	n        int
	starting bool
	done     bool
	// holdOutput: the lease covers runner.Spec.HoldOutput's descriptors.
	holdOutput bool
}

// acquire reserves a's descriptors for its run, or refuses with BUSY when
// the agent has no room for them, then waits for a turn to start.
func (b *fdBudget) acquire(a wire.ExecRequest) (*fdLease, *wire.WireError) {
	n := fdsFor(a)
	b.mu.Lock()
	if b.used+n > b.max {
		running := b.running
		b.mu.Unlock()
		return nil, wire.Errorf(wire.CodeBusy, "the sandbox is already running %d commands, background jobs and sessions at once, as many as its open-file limit (%d) leaves room for: wait for some to finish or stop background jobs you no longer need, then run this again", running, b.nofile)
	}
	hold := !a.Pty && b.running < holdMaxRunning && b.used+n+holdOutputFDs <= b.max
	if hold {
		n += holdOutputFDs
	}
	b.used += n
	b.running++
	b.mu.Unlock()
	b.starts <- struct{}{}
	return &fdLease{b: b, n: n, starting: true, holdOutput: hold}, nil
}

// started ends the lease's turn to start.
func (l *fdLease) started() {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.starting {
		l.starting = false
		<-l.b.starts
	}
}

// release gives the descriptors back once the command's are closed.
func (l *fdLease) release() {
	l.started()
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if !l.done {
		l.done = true
		l.b.used -= l.n
		l.b.running--
	}
}
