//go:build linux

package linuxrunner

import (
	"bytes"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// killGrace is how long a process tree gets between SIGTERM and SIGKILL.
const killGrace = 300 * time.Millisecond

// proc is one process started by the agent. The agent never calls
// exec.Cmd.Wait: a single reaper collects every exit status (the agent may
// be PID 1 or a subreaper, so it must reap orphans too, and two waiters
// would steal each other's statuses).
type proc struct {
	pid  int
	tag  uint64 // its command's tag (tags.go); 0 if none
	pgid int
	ptmx *os.File
	// The process's standard streams, as runner.Process hands them out.
	stdin, stdout, stderr *os.File
	done                  chan struct{}
	status                syscall.WaitStatus
	start                 time.Time
	end                   time.Time
	table                 *procTable // set by register
	// pidfd is where the runner's own clone saw the exit (start_clone.go):
	// closed with the output.
	pidfd pidfdHolder
	// held are the write ends of the process's output pipes, which the
	// runner's own clone keeps open in the agent until the process
	// exits (start_clone.go; closed by exited, under the table's mu).
	// While the agent holds them, the process's exit does not make the
	// pipes ready: its exit wakes the agent once, on its pidfd, and not
	// first for each pipe it closes on the way out. A warm `true` woke
	// the agent three times as it exited, each time (on one CPU)
	// preempting the exiting process for a wake-up that found no work.
	held []int
}

// exited records p's exit with status ws (the table's mu held): its
// output pipes' held write ends are closed, so that they end in EOF once
// no process of the command holds them any more, then Done is closed.
func (p *proc) exited(ws syscall.WaitStatus) {
	p.status = ws
	p.end = time.Now()
	for _, fd := range p.held {
		closeRaw(fd)
	}
	p.held = nil
	close(p.done)
}

// closeRaw is close(2) without telling the scheduler (it cannot block):
// the first system call the runtime is told of after the agent was idle
// wakes its monitor thread, sysmon, which then polls every 20 µs while
// the agent works. A warm command's agent made 17 context switches; 8
// with that monitor kept asleep.
func closeRaw(fd int) {
	syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
}

// output is the process's output as the server gets it: closing it also
// lets its pidfd go.
type output struct {
	*os.File
	p *proc
}

// Close closes the output (runner.Output).
func (o output) Close() error {
	err := o.File.Close()
	o.p.pidfd.outputClosed()
	return err
}

// whileLive runs f, unless p has been reaped, with the reaper held off:
// while f runs p's PID (and those of orphans we would reap) cannot be
// freed and reused by an unrelated process. It reports whether f ran.
func (p *proc) whileLive(f func()) bool {
	t := p.table
	if t == nil {
		f()
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	f()
	return true
}

// exitCode returns the shell-style exit code (128+signal for a signal).
func (p *proc) exitCode() (int, string) {
	ws := p.status
	if ws.Signaled() {
		sig := ws.Signal()
		return 128 + int(sig), unix.SignalName(sig)
	}
	return ws.ExitStatus(), ""
}

type procTable struct {
	mu        sync.Mutex
	live      map[int]*proc
	unclaimed map[int]syscall.WaitStatus
	tags      tagger // used under mu
}

func newProcTable() *procTable {
	return &procTable{live: map[int]*proc{}, unclaimed: map[int]syscall.WaitStatus{}, tags: newTagger()}
}

// orphanReapEvery is how often the reaper looks for exited orphans while
// commands run, where no signal tells it (notifyExits false): an orphan's
// zombie holds a PID, counted against the sandbox's pids limit, until then.
// Orphans are also reaped whenever a command's own process exits, and by
// every kill, which waits for its zombies.
const orphanReapEvery = 50 * time.Millisecond

func (t *procTable) startReaper() (stop func()) {
	var ch chan os.Signal // nil (never ready) without notifyExits
	if notifyExits {
		ch = make(chan os.Signal, 16)
		signal.Notify(ch, syscall.SIGCHLD)
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// With notifyExits, a safety net for coalesced signals.
		timer := time.NewTimer(time.Second)
		defer timer.Stop()
		for {
			t.reap()
			timer.Reset(t.reapEvery())
			select {
			case <-ch:
			case <-timer.C:
			case <-quit:
				return
			}
		}
	}()
	return func() {
		if ch != nil {
			signal.Stop(ch)
		}
		close(quit)
		wg.Wait()
		t.reap()
	}
}

// reapEvery is the reaper's period: orphanReapEvery while commands run and
// no signal wakes it, else a second.
func (t *procTable) reapEvery() time.Duration {
	if notifyExits {
		return time.Second
	}
	t.mu.Lock()
	busy := len(t.live) > 0
	t.mu.Unlock()
	if busy {
		return orphanReapEvery
	}
	return time.Second
}

// reap collects every exited child the agent may wait for without __WALL:
// orphans, and commands whose exec made them ordinary children.
func (t *procTable) reap() {
	for {
		var ws syscall.WaitStatus
		// Under mu, so that proc.whileLive can hold a PID in place.
		t.mu.Lock()
		// WNOHANG: it cannot block, so raw (see readRaw in package server).
		r, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&ws)), syscall.WNOHANG, 0, 0, 0)
		pid := int(r)
		if e == syscall.EINTR {
			t.mu.Unlock()
			continue
		}
		if pid <= 0 || e != 0 {
			t.mu.Unlock()
			return
		}
		if p := t.live[pid]; p != nil {
			delete(t.live, pid)
			p.exited(ws)
		} else if len(t.unclaimed) < 4096 {
			// An orphan, or a child that exited before it was registered.
			t.unclaimed[pid] = ws
		}
		t.mu.Unlock()
	}
}

func (t *procTable) register(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.table = t
	if ws, ok := t.unclaimed[p.pid]; ok {
		delete(t.unclaimed, p.pid)
		p.exited(ws)
		return
	}
	t.live[p.pid] = p
}

func (t *procTable) killAll() {
	t.mu.Lock()
	var ps []*proc
	for _, p := range t.live {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	for _, p := range ps {
		killTree(p, syscall.SIGKILL)
	}
}

// openPty opens a terminal of rows x cols (40 x 200 where zero) for a
// command: the master, pollable (see pollable), and the blocking tty the
// command gets as its standard streams.
func openPty(rows, cols uint16) (ptmx, tty *os.File, err error) {
	ptmx, tty, err = pty.Open()
	if err != nil {
		return nil, nil, err
	}
	if rows == 0 {
		rows = 40
	}
	if cols == 0 {
		cols = 200
	}
	_ = pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols})
	if ptmx, err = pollable(ptmx); err != nil {
		tty.Close()
		return nil, nil, err
	}
	return ptmx, tty, nil
}

// pollable returns the pty master f in non-blocking mode, served by the
// runtime's poller, and closes f. The pty package reaches the master
// through Fd(), which leaves it blocking; a read blocked on a blocking fd
// ignores Close, so a process that kept the terminal open would hang the
// call for good. Callers must not use Fd() on the result (use SyscallConn).
func pollable(f *os.File) (*os.File, error) {
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// sessionMembers lists the processes of session sid, found by one pass
// over /proc.
func sessionMembers(sid int) []int {
	var out []int
	want := strconv.Itoa(sid)
	procStats(func(pid int, f []string) {
		if len(f) > 3 && f[3] == want {
			out = append(out, pid)
		}
	})
	return out
}

// procStats calls fn for every process in /proc with the fields of its
// stat file after the command name (state ppid pgrp session ...): the name
// may contain spaces and parentheses, so they are taken after the last
// ')'.
func procStats(fn func(pid int, fields []string)) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		fn(pid, strings.Fields(string(b[i+2:])))
	}
}

// killTree signals a process's group, every descendant still linked to it,
// and every process carrying its command's tag (see tags.go), so that a
// child that left the group (setsid) or the tree (a double fork) is not
// missed; SIGKILL is repeated until none is left. A process on a pty
// leads its own session, and what it started there is signalled too: an
// interactive shell puts each background job in a group of its own, and a
// job outlives the shell re-parented to the agent, yet it keeps the
// session id (and the terminal, whose output would never end).
func killTree(p *proc, sig syscall.Signal) {
	live := p.whileLive(func() {
		if p.ptmx != nil {
			for _, pid := range sessionMembers(p.pid) {
				_ = syscall.Kill(pid, sig)
			}
		}
		for _, pid := range descendants(p.pid) {
			_ = syscall.Kill(pid, sig)
		}
		_ = syscall.Kill(-p.pgid, sig)
		_ = syscall.Kill(p.pid, sig)
	})
	if !live {
		p.killGroup(sig)
	}
	if sig == syscall.SIGKILL {
		killTagged(p)
		return
	}
	if ts := tagged(p.tag); len(ts) > 0 {
		ds, _ := procTree(ts)
		signalAll(append(ts, ds...), sig)
	}
}

// killGroup signals the process group (for a pty, the session) of p,
// whose leader has been reaped: members may live on. Once none does, the
// number may have been reused, and the agent's own later commands are the
// likely reusers (each leads a group or session): one that holds the
// number now is left alone.
func (p *proc) killGroup(sig syscall.Signal) {
	if t := p.table; t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		if q := t.live[p.pgid]; q != nil && q != p {
			return
		}
	}
	if p.ptmx != nil {
		for _, pid := range sessionMembers(p.pid) {
			_ = syscall.Kill(pid, sig)
		}
	}
	_ = syscall.Kill(-p.pgid, sig)
}

// terminate ends every process of p's command: SIGTERM, then SIGKILL
// after killGrace to what is left. The command's processes (its tree, and
// everything carrying its tag: setsid daemons, double-forked orphans) are
// stopped first (freezeTree), so that every one is known before any dies
// and none forks meanwhile. It returns how many processes other than p's
// own it signalled.
func terminate(p *proc) int {
	var tree []int
	term := func(roots []int) {
		tree = freezeTree(roots, true)
		signalAll(tree, syscall.SIGTERM)
		_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
		signalAll(tree, syscall.SIGCONT)
		_ = syscall.Kill(-p.pgid, syscall.SIGCONT)
	}
	live := p.whileLive(func() { term(append([]int{p.pid}, tagged(p.tag)...)) })
	if !live {
		// Reaped: its PID (and so its group's) may already belong to
		// another process: only the tag and killGroup's check are safe.
		p.killGroup(syscall.SIGTERM)
		tree = freezeTree(tagged(p.tag), true)
		signalAll(tree, syscall.SIGTERM)
		signalAll(tree, syscall.SIGCONT)
	}
	// A grace for SIGTERM handlers, ended early once everything is gone.
	deadline := time.Now().Add(killGrace)
	for time.Now().Before(deadline) && (!isClosed(p.done) || anyAlive(tree)) {
		time.Sleep(5 * time.Millisecond)
	}
	killed := killTagged(p)
	p.killGroup(syscall.SIGKILL)
	for _, pid := range tree {
		killed[pid] = true
	}
	delete(killed, p.pid)
	return len(killed)
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// freezeTree stops all descendants of roots (and the roots themselves when
// stopRoots is set) with SIGSTOP and returns them. It walks /proc again until a pass finds no new process
// and every one found is stopped: a stopped process cannot fork, and as
// nothing in the tree dies, no child leaves it by re-parenting. The
// passes are bounded; a tree that keeps growing past them is killed as
// far as it was found.
func freezeTree(roots []int, stopRoots bool) []int {
	seen := map[int]bool{}
	var all []int
	for _, r := range roots {
		seen[r] = true
		if stopRoots && syscall.Kill(r, syscall.SIGSTOP) == nil {
			all = append(all, r)
		}
	}
	for range 200 {
		found, states := procTree(append(append([]int(nil), roots...), all...))
		settled := true
		for _, pid := range found {
			if !seen[pid] {
				seen[pid] = true
				all = append(all, pid)
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				settled = false
			}
		}
		for _, pid := range all {
			// 'T' stopped, 'Z'/'X' dead; anything else may still fork.
			if st, ok := states[pid]; ok && st != 'T' && st != 't' && st != 'Z' && st != 'X' {
				settled = false
			}
		}
		if settled {
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	return all
}

// StopDescendants stops every process below root with SIGSTOP, walking
// /proc until the tree is stopped and complete, and returns them (SIGCONT
// them to resume). Backends without a freezer pause a sandbox with it.
func StopDescendants(root int) []int { return freezeTree([]int{root}, false) }

// Descendants lists every process whose parent chain leads to root, found
// by one pass over /proc. Backends use it to pause or kill a sandbox that
// shares the host's PID namespace.
func Descendants(root int) []int { return descendants(root) }

func descendants(root int) []int {
	pids, _ := procTree([]int{root})
	return pids
}

// procTree lists, in one pass over /proc, every process whose parent chain
// leads to one of roots (roots excluded), and the state letter of every
// process it read.
func procTree(roots []int) ([]int, map[int]byte) {
	children := map[int][]int{}
	states := map[int]byte{}
	procStats(func(pid int, f []string) {
		if len(f) < 2 {
			return
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
		states[pid] = f[0][0]
	})
	var out []int
	isRoot := map[int]bool{}
	for _, r := range roots {
		isRoot[r] = true
	}
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, c := range children[n] {
			if isRoot[c] {
				continue
			}
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, states
}

// killDescendants kills every process below the agent, repeating until
// none is left (a fork bomb keeps creating them) or a bound is reached;
// reap collects the zombies meanwhile (they are listed until reaped).
func killDescendants(root int, reap func()) {
	for range 50 {
		reap()
		ds := descendants(root)
		if len(ds) == 0 {
			return
		}
		for _, pid := range ds {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Signal delivers sr (runner.Process).
func (p *proc) Signal(sr wire.SignalRequest) {
	sig := syscall.Signal(sr.Signal)
	switch {
	case sr.Foreground && p.ptmx != nil:
		// Not Fd(): it would put the master back in blocking mode.
		pgrp, err := -1, error(nil)
		if rc, cerr := p.ptmx.SyscallConn(); cerr == nil {
			cerr = rc.Control(func(fd uintptr) { pgrp, err = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) })
			if err == nil {
				err = cerr
			}
		}
		if err == nil && pgrp > 0 {
			_ = syscall.Kill(-pgrp, sig)
			return
		}
		_ = syscall.Kill(-p.pgid, sig)
	case sr.Group && sig == syscall.SIGKILL:
		// A kill of the group takes what the process started outside
		// it too (setsid children, a shell's background jobs): once the
		// leader is dead they could no longer be found.
		killTree(p, sig)
	case sr.Group:
		_ = syscall.Kill(-p.pgid, sig)
	default:
		_ = syscall.Kill(p.pid, sig)
	}
}

// PID is the process's id (runner.Process).
func (p *proc) PID() int { return p.pid }

// Stdin is where the process's input goes (runner.Process).
func (p *proc) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil // an untyped nil: the server tests for it
	}
	return p.stdin
}

// Stdout is the process's output (runner.Process).
func (p *proc) Stdout() runner.Output { return output{p.stdout, p} }

// Stderr is the process's error output, nil on a pty (runner.Process).
func (p *proc) Stderr() runner.Output {
	if p.stderr == nil {
		return nil
	}
	return p.stderr
}

// Done is closed once the reaper collected the process (runner.Process).
func (p *proc) Done() <-chan struct{} { return p.done }

// Exit reports how the process ended (runner.Process).
func (p *proc) Exit() (code int, signal string, start, end time.Time) {
	code, signal = p.exitCode()
	return code, signal, p.start, p.end
}

// SignalTree signals the whole command (runner.Process).
func (p *proc) SignalTree(sig int) { killTree(p, syscall.Signal(sig)) }

// Terminate ends the whole command (runner.Process).
func (p *proc) Terminate() int { return terminate(p) }

// Survivors lists the command's processes still alive (runner.Process).
func (p *proc) Survivors() []int { return survivors(p) }

// OutputHolders lists the processes still holding the process's output
// pipes (runner.Process).
func (p *proc) OutputHolders() []int {
	inodes := []uint64{pipeInode(p.stdout)}
	if p.stderr != nil {
		inodes = append(inodes, pipeInode(p.stderr))
	}
	return pipeHolders(inodes...)
}

// pidfdHolder closes a command's pidfd once the runner has reaped the
// command and the server has closed its output, whichever comes last.
type pidfdHolder struct {
	mu        sync.Mutex
	f         *os.File
	outClosed bool
}

// hold takes f, the reaped command's pidfd.
func (h *pidfdHolder) hold(f *os.File) {
	h.mu.Lock()
	if !h.outClosed {
		h.f = f
		f = nil
	}
	h.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// outputClosed is told that the server closed the command's output.
func (h *pidfdHolder) outputClosed() {
	h.mu.Lock()
	h.outClosed = true
	f := h.f
	h.f = nil
	h.mu.Unlock()
	if f != nil {
		f.Close()
	}
}
