package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// killGrace is how long a process tree gets between SIGTERM and SIGKILL.
const killGrace = 300 * time.Millisecond

// drainGrace is how long after a command's main process exits the agent
// waits for the end of its output before it checks who still holds the
// pipes (drainOutput): a background child holding them open must not make
// the call hang, while output the command printed is read to its end
// however slowly the caller takes it. After a kill it bounds the wait.
const drainGrace = 200 * time.Millisecond

// proc is one process started by the agent. The agent never calls
// exec.Cmd.Wait: a single reaper collects every exit status (the agent may
// be PID 1 or a subreaper, so it must reap orphans too, and two waiters
// would steal each other's statuses).
type proc struct {
	pid    int
	tag    uint64 // its command's tag (tags.go); 0 if none
	pgid   int
	ptmx   *os.File
	done   chan struct{}
	status syscall.WaitStatus
	start  time.Time
	end    time.Time
	table  *procTable // set by register
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

func (t *procTable) startReaper() (stop func()) {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second) // a safety net for coalesced signals
		defer tick.Stop()
		for {
			t.reap()
			select {
			case <-ch:
			case <-tick.C:
			case <-quit:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(quit)
		wg.Wait()
		t.reap()
	}
}

func (t *procTable) reap() {
	for {
		var ws syscall.WaitStatus
		// Under mu, so that proc.whileLive can hold a PID in place.
		t.mu.Lock()
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			t.mu.Unlock()
			continue
		}
		if pid <= 0 || err != nil {
			t.mu.Unlock()
			return
		}
		if p := t.live[pid]; p != nil {
			delete(t.live, pid)
			p.status = ws
			p.end = time.Now()
			close(p.done)
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
		p.status = ws
		p.end = time.Now()
		close(p.done)
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

// stdio is the host side of a started process's standard streams.
type stdio struct {
	stdin  *os.File // nil when stdin is /dev/null
	stdout *os.File
	stderr *os.File // nil for a pty
}

func (s *server) resolveDir(dir string) (string, *wire.WireError) {
	rel, werr := s.ws.rel(dir)
	if werr != nil {
		return "", werr
	}
	fi, err := s.ws.root.Stat(rel)
	if err != nil {
		return "", fsError(dir, err)
	}
	if !fi.IsDir() {
		return "", wire.Errorf(wire.CodeNotDir, "working directory %q is not a directory", dir)
	}
	return filepath.Join(s.ws.host, rel), nil
}

func mergeEnv(base, extra []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range append(append([]string{}, base...), extra...) {
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

// startProcess starts a in its own process group (or session, for a pty)
// and registers it with the reaper.
func (s *server) startProcess(a wire.ExecRequest) (*proc, *stdio, *wire.WireError) {
	if s.processesReady != nil {
		<-s.processesReady
	}
	if len(a.Args) == 0 || a.Args[0] == "" {
		return nil, nil, wire.Errorf(wire.CodeInvalidArgument, "exec needs a program to run (args is empty)")
	}
	dir, werr := s.resolveDir(a.Dir)
	if werr != nil {
		return nil, nil, werr
	}
	env := mergeEnv(s.hello.Env, a.Env)
	path := a.Args[0]
	if !strings.Contains(path, "/") {
		if p := lookPathIn(path, env); p != "" {
			path = p
		} else {
			return nil, nil, wire.Errorf(wire.CodeNotFound, "program %q not found on the sandbox PATH", a.Args[0])
		}
	}
	cmd := &exec.Cmd{Path: path, Args: a.Args, Env: env, Dir: dir}
	io := &stdio{}
	var closeAfter []*os.File
	fail := func(err error) (*proc, *stdio, *wire.WireError) {
		for _, f := range closeAfter {
			f.Close()
		}
		for _, f := range []*os.File{io.stdin, io.stdout, io.stderr} {
			if f != nil {
				f.Close()
			}
		}
		return nil, nil, wire.Errorf(wire.CodeExec, "cannot start %q: %v", a.Args[0], err)
	}
	p := &proc{done: make(chan struct{})}
	if a.Pty {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return fail(err)
		}
		rows, cols := a.Rows, a.Cols
		if rows == 0 {
			rows = 40
		}
		if cols == 0 {
			cols = 200
		}
		_ = pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols})
		if ptmx, err = pollable(ptmx); err != nil {
			tty.Close()
			return fail(err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		closeAfter = append(closeAfter, tty)
		io.stdout = ptmx
		io.stdin = ptmx
		p.ptmx = ptmx
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if a.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			cmd.Stdin = r
			closeAfter = append(closeAfter, r)
			io.stdin = w
		}
		or, ow, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		cmd.Stdout = ow
		closeAfter = append(closeAfter, ow)
		io.stdout = or
		er, ew, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		cmd.Stderr = ew
		closeAfter = append(closeAfter, ew)
		io.stderr = er
	}
	s.procs.mu.Lock() // hold off the reaper until p is registered
	p.tag = s.procs.tags.arm()
	var err error
	if s.spawn != nil {
		err = s.spawn(cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		s.procs.mu.Unlock()
		return fail(err)
	}
	p.pid = cmd.Process.Pid
	p.pgid = p.pid
	p.start = time.Now()
	s.procs.mu.Unlock()
	s.procs.register(p)
	_ = cmd.Process.Release()
	for _, rl := range s.hello.Rlimits {
		lim := unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}
		if err := prlimit(p.pid, rl.Resource, &lim, nil); err != nil && err != unix.ESRCH {
			// A limit that cannot be applied is a control not in force:
			// refuse to let the process run without it.
			killTree(p, syscall.SIGKILL)
			for _, f := range []*os.File{io.stdin, io.stdout, io.stderr} {
				if f != nil {
					f.Close()
				}
			}
			for _, f := range closeAfter {
				f.Close()
			}
			return nil, nil, wire.Errorf(wire.CodeExec, "cannot apply %s to %q: %v", rl.Name, a.Args[0], err)
		}
	}
	if len(s.hello.Rlimits) > 0 {
		limitForked(p.pid, s.hello.Rlimits, 0)
	}
	for _, f := range closeAfter {
		f.Close()
	}
	return p, io, nil
}

// limitForked applies rlimits to the processes pid forked before its own
// limits landed: they are set with prlimit once the process runs, and a
// shell may already have forked (a busy agent makes that window wider), so a
// CPU spin started first would escape RLIMIT_CPU. Each child is limited
// before its own children are listed, so a grandchild is either listed or
// forked after its parent was limited (and inherits the limits).
func limitForked(pid int, rls []wire.Rlimit, depth int) {
	if depth > 16 {
		return
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		c, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		for _, rl := range rls {
			lim := unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}
			_ = prlimit(c, rl.Resource, &lim, nil) // ESRCH: it is gone already
		}
		limitForked(c, rls, depth+1)
	}
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
// none is left (a fork bomb keeps creating them) or a bound is reached.
func killDescendants(root int) {
	for range 50 {
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

// maxCapture caps ExecRequest.MaxOutput.
const maxCapture = 8 << 20

// capture keeps the head of a stream (streamed as produced) and a tail
// ring, dropping and counting the middle.
type capture struct {
	headLeft int
	limited  bool
	tail     []byte
	tailCap  int
	dropped  int64
}

func newCapture(max int) *capture {
	if max <= 0 {
		return &capture{}
	}
	// Both tails travel base64-encoded in one reply frame (MaxPayload).
	max = min(max, maxCapture)
	head := max / 2
	return &capture{headLeft: head, limited: true, tailCap: max - head}
}

// add returns the part of b to stream now; the rest is kept in the tail.
func (c *capture) add(b []byte) []byte {
	if !c.limited {
		return b
	}
	n := min(len(b), c.headLeft)
	c.headLeft -= n
	out, rest := b[:n], b[n:]
	if len(rest) > 0 {
		c.tail = append(c.tail, rest...)
		if over := len(c.tail) - c.tailCap; over > 0 {
			c.dropped += int64(over)
			c.tail = append(c.tail[:0], c.tail[over:]...)
		}
	}
	return out
}

// runExec runs one command to completion, streaming its output.
func (s *server) runExec(r *request, a wire.ExecRequest) (any, *wire.WireError) {
	lease, werr := s.fds.acquire(a)
	if werr != nil {
		return nil, werr
	}
	defer lease.release()
	of, werr := s.openOutputFile(a.OutputFile, a.OutputFileLimit)
	if werr != nil {
		return nil, werr
	}
	p, io, werr := s.startProcess(a)
	if werr != nil {
		of.close()
		return nil, werr
	}
	lease.started()
	if a.Events {
		r.event(wire.Event{Kind: "started", PID: p.pid})
	}
	r.setSignalHandler(func(sr wire.SignalRequest) { signalProc(p, sr) })
	outCap, errCap := newCapture(a.MaxOutput), newCapture(a.MaxOutput)
	var readers sync.WaitGroup
	streamTo := func(f *os.File, t wire.FrameType, c *capture) {
		readers.Add(1)
		go func() {
			defer readers.Done()
			pump(f, func(b []byte) {
				of.write(b)
				if head := c.add(b); len(head) > 0 {
					r.sendData(t, head)
				}
			})
		}()
	}
	streamTo(io.stdout, wire.FrameStdout, outCap)
	if io.stderr != nil {
		streamTo(io.stderr, wire.FrameStderr, errCap)
	}
	if io.stdin != nil && !a.Pty {
		go func() {
			for {
				b, ok := r.readInput()
				if !ok {
					io.stdin.Close()
					return
				}
				if _, err := io.stdin.Write(b); err != nil {
					// The process closed its stdin; keep acknowledging input.
					for {
						if _, ok := r.readInput(); !ok {
							io.stdin.Close()
							return
						}
					}
				}
			}
		}()
	} else if a.Pty {
		go func() {
			for {
				b, ok := r.readInput()
				if !ok {
					return // keep the pty open: closing the master would hang up the session
				}
				_, _ = io.stdin.Write(b)
			}
		}()
	}
	timeout, stop := s.timeoutOf(a)
	defer stop()
	rep := wire.ExecReply{PID: p.pid}
	select {
	case <-p.done:
	case <-timeout:
		rep.TimedOut = true
		rep.Killed = terminate(p)
	case <-r.ctx.Done():
		rep.Canceled = true
		rep.Killed = terminate(p)
	}
	<-p.done
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	if rep.TimedOut || rep.Canceled || a.Pty {
		// Killed, or a terminal: output is not owed past the grace. On a
		// pty, what still holds the terminal once the shell is gone is a
		// job it left behind (see killTree).
		select {
		case <-drained:
		case <-time.After(drainGrace):
			killTree(p, syscall.SIGKILL)
			stopPump(io.stdout)
			if io.stderr != nil {
				stopPump(io.stderr)
			}
			<-drained
		}
	} else {
		// Everything the command printed before it exited is in the
		// pipes: read it all, however slowly the caller takes it.
		rep.LeftRunning = drainOutput(drained, io.stdout, io.stderr)
	}
	io.stdout.Close()
	if io.stderr != nil {
		io.stderr.Close()
	}
	rep.OutputFileReport = of.close()
	if rep.TimedOut || rep.Canceled {
		rep.Survivors = survivors(p)
	}
	rep.ExitCode, rep.Signal = p.exitCode()
	rep.DurationNs = p.end.Sub(p.start).Nanoseconds()
	rep.StdoutTail, rep.StdoutDropped = outCap.tail, outCap.dropped
	rep.StderrTail, rep.StderrDropped = errCap.tail, errCap.dropped
	return rep, nil
}

func signalProc(p *proc, sr wire.SignalRequest) {
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

var errNoJob = errors.New("no such job")

// ring keeps the last cap bytes of a job's combined output with absolute
// offsets, so a poller can resume from a cursor and learn what it missed.
type ring struct {
	buf     []byte
	cap     int
	written int64
}

func (r *ring) write(b []byte) {
	r.written += int64(len(b))
	if len(b) >= r.cap {
		r.buf = append(r.buf[:0], b[len(b)-r.cap:]...)
		return
	}
	r.buf = append(r.buf, b...)
	if over := len(r.buf) - r.cap; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
}

func (r *ring) read(since int64, max int) (data []byte, next, dropped int64) {
	oldest := r.written - int64(len(r.buf))
	if since < oldest {
		dropped = oldest - since
		since = oldest
	}
	if since > r.written {
		since = r.written
	}
	start := int(since - oldest)
	end := len(r.buf)
	if max > 0 && end-start > max {
		end = start + max
	}
	return append([]byte(nil), r.buf[start:end]...), since + int64(end-start), dropped
}

type job struct {
	id          string
	args        []string
	p           *proc
	stdin       *os.File
	mu          sync.Mutex
	out         ring
	of          *outputFile   // nil without ExecRequest.OutputFile
	leftRunning []int         // set before done closes
	done        chan struct{} // closed when the process exited and output drained
}

type jobTable struct {
	mu    sync.Mutex
	next  int
	jobs  map[string]*job
	order []string
}

func newJobTable() *jobTable { return &jobTable{jobs: map[string]*job{}} }

// maxEndedJobs bounds how many finished jobs are remembered.
const maxEndedJobs = 200

func (s *server) startJob(a wire.ExecRequest) (any, *wire.WireError) {
	lease, werr := s.fds.acquire(a)
	if werr != nil {
		return nil, werr
	}
	of, werr := s.openOutputFile(a.OutputFile, a.OutputFileLimit)
	if werr != nil {
		lease.release()
		return nil, werr
	}
	p, io, werr := s.startProcess(a)
	if werr != nil {
		of.close()
		lease.release()
		return nil, werr
	}
	lease.started()
	ringBytes := a.RingBytes
	if ringBytes <= 0 {
		ringBytes = 1 << 20
	}
	t := s.jobs
	t.mu.Lock()
	t.next++
	j := &job{id: fmt.Sprintf("job-%d", t.next), args: a.Args, p: p, stdin: io.stdin, out: ring{cap: ringBytes}, of: of, done: make(chan struct{})}
	t.jobs[j.id] = j
	t.order = append(t.order, j.id)
	t.pruneLocked()
	t.mu.Unlock()
	var readers sync.WaitGroup
	for _, f := range []*os.File{io.stdout, io.stderr} {
		if f == nil {
			continue
		}
		readers.Add(1)
		go func(f *os.File) {
			defer readers.Done()
			pump(f, func(b []byte) {
				of.write(b)
				j.mu.Lock()
				j.out.write(b)
				j.mu.Unlock()
			})
		}(f)
	}
	go func() {
		timeout, stop := s.timeoutOf(a)
		defer stop()
		killed := false
		select {
		case <-p.done:
		case <-timeout:
			killed = true
			terminate(p)
		}
		<-p.done
		drained := make(chan struct{})
		go func() { readers.Wait(); close(drained) }()
		var left []int
		if killed {
			select {
			case <-drained:
			case <-time.After(drainGrace):
				stopPump(io.stdout)
				if io.stderr != nil {
					stopPump(io.stderr)
				}
				<-drained
			}
		} else {
			left = drainOutput(drained, io.stdout, io.stderr)
		}
		io.stdout.Close()
		if io.stderr != nil {
			io.stderr.Close()
		}
		of.close()
		lease.release()
		j.mu.Lock()
		j.leftRunning = left
		if j.stdin != nil {
			j.stdin.Close()
			j.stdin = nil
		}
		j.mu.Unlock()
		close(j.done)
	}()
	return wire.ExecReply{PID: p.pid, JobID: j.id}, nil
}

func (t *jobTable) pruneLocked() {
	ended := 0
	for _, id := range t.order {
		if j := t.jobs[id]; j != nil && isClosed(j.done) {
			ended++
		}
	}
	for i := 0; ended > maxEndedJobs && i < len(t.order); {
		id := t.order[i]
		if j := t.jobs[id]; j != nil && isClosed(j.done) {
			delete(t.jobs, id)
			t.order = append(t.order[:i], t.order[i+1:]...)
			ended--
			continue
		}
		i++
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (t *jobTable) get(id string) (*job, *wire.WireError) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	if j == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "no background job %q: list jobs to see the ids that exist", id)
	}
	return j, nil
}

func (j *job) statusLocked() wire.JobStatus {
	st := wire.JobStatus{ID: j.id, Args: j.args, PID: j.p.pid, StartedNs: j.p.start.UnixNano(), Written: j.out.written,
		OutputFileReport: j.of.report()}
	if isClosed(j.done) {
		st.LeftRunning = j.leftRunning
		st.ExitCode, st.Signal = j.p.exitCode()
		st.EndedNs = j.p.end.UnixNano()
	} else {
		st.Running = true
	}
	return st
}

func (t *jobTable) output(a wire.JobOutputRequest) (any, *wire.WireError) {
	j, werr := t.get(a.ID)
	if werr != nil {
		return nil, werr
	}
	max := a.Max
	if max <= 0 || max > 4<<20 {
		max = 4 << 20
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	data, next, dropped := j.out.read(a.Since, max)
	return wire.JobOutput{Data: data, Next: next, Dropped: dropped, Status: j.statusLocked()}, nil
}

func (t *jobTable) status(id string) (any, *wire.WireError) {
	j, werr := t.get(id)
	if werr != nil {
		return nil, werr
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.statusLocked(), nil
}

func (t *jobTable) wait(ctx context.Context, id string) (any, *wire.WireError) {
	j, werr := t.get(id)
	if werr != nil {
		return nil, werr
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		return nil, wire.Errorf(wire.CodeCanceled, "wait for job %s abandoned", id)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.statusLocked(), nil
}

func (t *jobTable) signal(id string, sig syscall.Signal) (any, *wire.WireError) {
	j, werr := t.get(id)
	if werr != nil {
		return nil, werr
	}
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		go terminateJob(j, sig)
	} else {
		killTree(j.p, sig)
	}
	return struct{}{}, nil
}

func terminateJob(j *job, sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		killTree(j.p, syscall.SIGKILL)
		return
	}
	terminate(j.p)
}

func (t *jobTable) stdin(a wire.JobStdinRequest) (any, *wire.WireError) {
	j, werr := t.get(a.ID)
	if werr != nil {
		return nil, werr
	}
	j.mu.Lock()
	f := j.stdin
	if a.Close {
		j.stdin = nil
	}
	j.mu.Unlock()
	if f == nil {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "job %s has no open stdin (start it with stdin enabled; it may have been closed or the job ended)", a.ID)
	}
	if len(a.Data) > 0 {
		if _, err := f.Write(a.Data); err != nil {
			return nil, wire.Errorf(wire.CodeExec, "writing to job %s stdin: %v", a.ID, err)
		}
	}
	if a.Close {
		f.Close()
	}
	return struct{}{}, nil
}

func (t *jobTable) list() []wire.JobStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]wire.JobStatus, 0, len(t.order))
	for _, id := range t.order {
		j := t.jobs[id]
		j.mu.Lock()
		out = append(out, j.statusLocked())
		j.mu.Unlock()
	}
	return out
}

func (t *jobTable) remove(id string) (any, *wire.WireError) {
	j, werr := t.get(id)
	if werr != nil {
		return nil, werr
	}
	if !isClosed(j.done) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "job %s is still running: kill it first", id)
	}
	t.mu.Lock()
	delete(t.jobs, id)
	for i, o := range t.order {
		if o == id {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
	return struct{}{}, nil
}

func (t *jobTable) killAll() {
	t.mu.Lock()
	var js []*job
	for _, j := range t.jobs {
		js = append(js, j)
	}
	t.mu.Unlock()
	for _, j := range js {
		killTree(j.p, syscall.SIGKILL)
	}
	for _, j := range js {
		select {
		case <-j.done:
		case <-time.After(2 * time.Second):
		}
	}
}

var _ = io.EOF
