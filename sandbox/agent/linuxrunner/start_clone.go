//go:build linux && amd64

package linuxrunner

// The start of a command: a clone of the runner's own instead of os/exec.
//
// The child is a vfork-style clone (CLONE_VM|CLONE_VFORK: no copy of the
// agent's page tables; the calling thread sleeps until the child has
// exec'd) that runs a few raw system calls computed beforehand — its
// group or session, its descriptors, its directory, its rlimits and tag,
// the signal state — and execs. What that buys, per command:
//
//   - The rlimits are in force before the command's first instruction.
//     They used to be set with prlimit once it ran: in that window a
//     shell could fork, and a child that left its tree before
//     limitForked listed it (a double fork: `sh -c '(spin &); exit'`)
//     escaped RLIMIT_CPU for good. The tag (tags.go) is set the same
//     way, so the agent no longer carries it across the fork itself.
//   - The exit is seen on the child's pidfd (CLONE_PIDFD), which the
//     runtime's poller watches: the goroutine waiting for it reaps the
//     child (wait4 with __WALL) as soon as the poller wakes. The reaper
//     is no longer woken through os/signal for every exit (notifyExits):
//     that cost the signal handler's thread, the os/signal thread and the
//     reaper goroutine a wake-up each before the reply could go out.
//     (The clone's exit signal is 0, which keeps a child that fails before
//     execve from the reaper's wait4; execve makes it SIGCHLD again.)
//   - No descriptors beyond the command's pipes: os/exec made every pipe
//     end pollable and back, opened /dev/null per command, and read an
//     exec-status pipe; here the child reports a failure in the memory it
//     shares with the agent.
//   - The clone runs on the thread that handles the request: the child
//     joins the commands' pids cgroup itself (joinCgroup). Commands used
//     to be forked by a thread of the agent parked in that cgroup
//     (isolate's spawner), and each start cost a hand-off to it and back:
//     two thread wake-ups, usually across CPUs, on the request's path.
//
// Measured on the 2-core test VM (BenchmarkWarmCommand, namespace tier,
// chrt -f 50, the build before this file and this one alternated three
// times, load 5): a warm `true` costs 1.27-1.30x a plain exec instead of
// 1.39-1.46x (0.82-0.85 ms instead of 0.90-1.04, exec 0.64-0.71 ms); the
// agent makes 12.5-13 context switches per command instead of 18-19 and
// uses 300-350 µs of CPU instead of 430-580. Joining the cgroup in the
// child instead of forking on the spawner thread, and SIGCHLD left at
// SIG_DFL (quietSignals), alternated with the build before them (chrt,
// load 2-5, BenchmarkFloorCommandRun and BenchmarkCommandRunCost in
// ./sandbox): 1.216-1.218x -> 1.162-1.182x a plain exec; per command the
// agent makes 9.7-9.9 context switches instead of 13.2-13.5 and uses
// 340-390 µs of CPU instead of 426-482. What is left above the exec is
// mostly the request's round trip (a Files.Stat: 0.13-0.17x of the exec
// by itself), then the runtime's monitor thread (sysmon), which the
// first system call made through the runtime after the agent was idle
// wakes (closing a command's output, an os.File, is one) and which then
// polls every 20 µs while the agent works: 6-7 of the agent's context
// switches per command, ~140 µs of its CPU.
//
// Session 8 (the build before and after alternated, 3000 commands each,
// load 1-3, BenchmarkCommandRunCost): the write ends of the output pipes
// held until the exit (proc.held), the PATH lookup's stat made raw
// (server's isExecutable, so the monitor is first woken after the reply,
// by the closes, not on the request's path) and Commands.Run reading its
// own reply took the host from 51-59 to 35-45 µs of CPU and 2.6-3.4 to
// 1.3-1.5 context switches per command, the agent from 211-285 to 191-230
// µs and 7.4-11.4 to 6.2-7.3; the monitor thread alone from 103 to 44 µs
// and 6.0 to 2.7 switches (load 14). The wall time did not move beyond
// the noise of a shared machine (FloorCommandRun 1.10-1.19x before,
// 1.14-1.17x after, load 3-12). Where the rest goes, traced (sched events
// and one uprobe a side, load 8, medians of ~170 commands each): a
// plain exec takes 78 µs from exec.Command to its clone, 165 to the
// execve, 416 to the exit and 55 more until its waiter wakes; a warm
// Commands.Run 21 µs to its request's write, 120 from there to the
// agent's clone (the request's wake-up and the agent's work: +63 µs over
// os/exec's), 185 to the execve (+20: the child's cgroup join, signal
// resets and limits), the same exit, and then 63 µs from the agent's
// wake-up to the reply's (os/exec's waiter is woken by the exit itself).
// A request and its reply are two wake-ups a plain exec does not have: a
// pipe's round trip between two Go processes costs 31-38 µs idle here,
// which alone puts any agent at ~1.05x a plain exec.

import (
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/internal/vfork"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
)

// notifyExits: the reaper is not woken by SIGCHLD. A command's exit is
// seen on its pidfd (await), and the signal path cost every command a
// wake-up of the thread its handler ran on, of the os/signal thread and of
// the reaper: 44% of the agent's thread wake-ups (notewakeup) for a warm
// `true`. (The pidfd's exit signal is 0, but execve makes it SIGCHLD
// again, so commands did signal.) Orphans are reaped by a timer while
// commands run, after each command's exit, and by kills (proc.go).
const notifyExits = false

// quietSignals puts back the default disposition of signals whose Go
// handler the agent does not need, so that nothing runs for them and the
// forked child has fewer handlers to reset before execve (child.sigs):
//
//   - SIGCHLD, where nothing waits for it (notifyExits is false): with the
//     Go runtime's handler installed, every command's exit (execve makes
//     the child's exit signal SIGCHLD) interrupted one of the agent's
//     sleeping threads to run a handler that drops it — a thread wake-up
//     per command for nothing (futex = -ERESTARTSYS, rt_sigreturn on the
//     idle thread in a trace of a warm true). SIG_DFL, unlike SIG_IGN,
//     keeps exit statuses for wait4: the kernel discards a
//     default-ignored signal when it is sent, before it wakes anyone, and
//     still leaves the zombie.
//   - The real-time signals above SIGRTMIN+1, which the runtime catches
//     and ignores (it uses none of them; glibc uses SIGRTMIN and
//     SIGRTMIN+1, and so does the runtime for its per-thread system
//     calls, so those keep their handlers). Each handled signal cost the
//     child of every command one rt_sigaction before execve (it must not
//     run a Go handler there: it shares the agent's memory): 54 of its 63
//     system calls, 0.2-0.35 µs each here. The default action of these
//     is to end the process; the agent is PID 1 of its PID namespace on
//     the namespace tier, where the kernel drops such signals from inside
//     the sandbox, and on the other tiers a command can end the agent
//     anyway (it runs as the agent's uid).
//
// Only a Go handler is replaced; a disposition the process chose itself
// (SIG_IGN, SIG_DFL) is left.
func quietSignals() {
	sigs := []uintptr{uintptr(syscall.SIGCHLD)}
	for sig := uintptr(sigRTMin + 2); sig <= 64; sig++ {
		sigs = append(sigs, sig)
	}
	for _, sig := range sigs {
		var old sigaction
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue
		}
		if old.handler == 0 || old.handler == 1 { // SIG_DFL, SIG_IGN
			continue
		}
		var dfl sigaction // SIG_DFL
		syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	}
}

// sigRTMin is the kernel's first real-time signal.
const sigRTMin = 32

// child is what the forked child does between clone and execve. Every
// field is computed by the parent: the child runs on the parent's stack
// with no runtime behind it (nosplit, no allocation, no Go calls but raw
// system calls), the way the syscall package's own forkExec child works.
type child struct {
	path, dir  uintptr // NUL-terminated strings
	argv, envv uintptr // NULL-terminated arrays of them
	// cgTasks and cgCurrent are Options.Cgroup's files (-1 without
	// one): the child joins that cgroup first (see joinCgroup).
	cgTasks, cgCurrent int
	cgMax              uint64
	cgBuf              [24]byte // pids.current, read by the child
	// stdio are the descriptors that become the child's 0, 1 and 2.
	stdio [3]int
	// setsid makes the child lead a new session (and with ctty take fd 0
	// as its terminal); otherwise it leads a new process group.
	setsid, ctty bool
	// limits are set with prlimit before execve, the tag first.
	limits []childLimit
	// sigs are the signals the agent handles: reset to SIG_DFL before the
	// mask is restored, or a signal arriving then would run the agent's
	// Go handler in the child.
	sigs []uintptr
	dfl  sigaction
	// mask is the signal mask to restore before execve (the parent
	// blocks every signal across the clone).
	mask uint64
	// Written by a failing child before it exits (the parent reads them
	// once clone returns, when the child has exec'd or exited).
	step  int
	errno syscall.Errno
}

// childLimit is one prlimit the child applies to itself.
type childLimit struct {
	resource uintptr
	lim      unix.Rlimit
	optional bool // the tag: a failure leaves the command untagged
}

// sigaction is the kernel's struct sigaction on amd64.
type sigaction struct {
	handler, flags, restorer uintptr
	mask                     uint64
}

// Steps a child can fail at (child.step); stepLimit+i is limits[i].
const (
	stepNone = iota
	stepCgroup
	stepCgroupFull
	stepGroup
	stepSignals
	stepStdio
	stepCtty
	stepDir
	stepExec
	stepLimit
)

// run is the child. It never returns: it execs or exits 127.
//
//go:nosplit
//go:norace
func (c *child) run() {
	var e syscall.Errno
	if c.cgTasks >= 0 {
		c.joinCgroup()
	}
	if c.setsid {
		_, _, e = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0)
	} else {
		_, _, e = syscall.RawSyscall(syscall.SYS_SETPGID, 0, 0, 0)
	}
	if e != 0 {
		c.fail(stepGroup, e)
	}
	for _, sig := range c.sigs {
		if _, _, e = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&c.dfl)), 0, 8, 0, 0); e != 0 {
			c.fail(stepSignals, e)
		}
	}
	// A source below 3 could be overwritten by an earlier dup3: move it
	// out of the way first.
	for i := 0; i < 3; i++ {
		if fd := c.stdio[i]; fd < 3 && fd != i {
			r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 3)
			if e != 0 {
				c.fail(stepStdio, e)
			}
			c.stdio[i] = int(r)
		}
	}
	for i := 0; i < 3; i++ {
		if fd := c.stdio[i]; fd == i {
			_, _, e = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFD, 0)
		} else {
			_, _, e = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(fd), uintptr(i), 0)
		}
		if e != 0 {
			c.fail(stepStdio, e)
		}
	}
	if c.ctty {
		if _, _, e = syscall.RawSyscall(syscall.SYS_IOCTL, 0, syscall.TIOCSCTTY, 0); e != 0 {
			c.fail(stepCtty, e)
		}
	}
	if _, _, e = syscall.RawSyscall(syscall.SYS_CHDIR, c.dir, 0, 0); e != 0 {
		c.fail(stepDir, e)
	}
	for i := range c.limits {
		l := &c.limits[i]
		if _, _, e = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, l.resource, uintptr(unsafe.Pointer(&l.lim)), 0, 0, 0); e != 0 && !l.optional {
			c.fail(stepLimit+i, e)
		}
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&c.mask)), 0, 8, 0, 0)
	_, _, e = syscall.RawSyscall(syscall.SYS_EXECVE, c.path, c.argv, c.envv)
	c.fail(stepExec, e)
}

// joinCgroup moves the child into Options.Cgroup before it can run
// anything: a v1 cgroup's "tasks" moves the writing thread, which is the
// whole child (one thread). It used to be born there instead, forked by a
// thread of the agent that had joined the cgroup (isolate's spawner): every
// start then cost a hand-off to that thread and back, two thread wake-ups
// on the request's path. A move into a pids cgroup is never refused (the
// controller charges it over the limit, unlike a fork, which it refuses
// with EAGAIN at pids.max), so the child checks the count it made: above
// Max it leaves with EAGAIN, the refused fork's error. Starts are
// serialised (procTable.mu), so a start never counts another's child;
// only the command's own processes and the ones that were there before
// it. Without the check, a command started while a fork bomb held the
// cgroup full would run one over the limit, and enough of them (jobs)
// would eat the agent's reserve in the parent cgroup, whose limit they
// count against too (TestStartsRefusedWhileTheCommandsCgroupIsFull).
// The child is charged to the agent's cgroup from clone to the move: one
// task of the agent's reserve, for microseconds.
//
//go:nosplit
//go:norace
func (c *child) joinCgroup() {
	if _, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(c.cgTasks), uintptr(unsafe.Pointer(&joinSelf[0])), 1); e != 0 {
		c.fail(stepCgroup, e)
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_PREAD64, uintptr(c.cgCurrent), uintptr(unsafe.Pointer(&c.cgBuf[0])), uintptr(len(c.cgBuf)), 0, 0, 0)
	if e != 0 {
		c.fail(stepCgroup, e)
	}
	var cur uint64
	digits := 0
	for i := 0; i < int(n) && i < len(c.cgBuf); i++ {
		b := c.cgBuf[i]
		if b < '0' || b > '9' {
			break
		}
		cur = cur*10 + uint64(b-'0')
		digits++
	}
	if digits == 0 {
		c.fail(stepCgroup, syscall.EINVAL)
	}
	if cur > c.cgMax {
		c.fail(stepCgroupFull, syscall.EAGAIN)
	}
}

// joinSelf is what a thread writes to a v1 cgroup's "tasks" to move itself.
var joinSelf = [1]byte{'0'}

// fail records where the child failed and exits.
//
//go:nosplit
//go:norace
func (c *child) fail(step int, e syscall.Errno) {
	c.step, c.errno = step, e
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 127, 0, 0)
	}
}

// forkChild clones (vfork.Vfork: on this stack, the caller asleep until
// the child has exec'd or exited; pidfd receives the child's pidfd with
// CLONE_PIDFD) and runs c in the child; it returns in the parent only. It
// must not be inlined: the child's frames overwrite everything below its
// own.
//
//go:noinline
//go:nosplit
//go:norace
func forkChild(c *child, flags uintptr, pidfd *int32) (pid uintptr, errno uintptr) {
	pid, errno = vfork.Vfork(flags, uintptr(unsafe.Pointer(pidfd)), 0)
	if pid != 0 || errno != 0 {
		return pid, errno
	}
	c.run()
	return 0, 0 // not reached
}

// handledSignals lists the signals whose disposition in this process is
// neither SIG_DFL nor SIG_IGN (the Go runtime's handler, for almost all):
// the child resets them. Ignored signals stay ignored across execve, as
// with os/exec. Read once: the runtime installs its handlers at start.
var handledSignals = sync.OnceValue(func() []uintptr {
	var out []uintptr
	for sig := uintptr(1); sig <= 64; sig++ {
		if sig == uintptr(syscall.SIGKILL) || sig == uintptr(syscall.SIGSTOP) {
			continue
		}
		var old sigaction
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue
		}
		if old.handler != 0 && old.handler != 1 { // SIG_DFL, SIG_IGN
			out = append(out, sig)
		}
	}
	return out
})

// devNull is the standard input of commands without one, opened once.
var devNull = sync.OnceValues(func() (int, error) {
	return unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
})

// pipe returns a pipe whose one end is the agent's (non-blocking, served
// by the runtime's poller) and the other the child's (blocking, close on
// exec: dup3 in the child clears that on its copy). The two ends are two
// open files, each with its own O_NONBLOCK: the pipe is made non-blocking
// and the child's end put back, one fcntl instead of a read and a write
// of the agent's end's flags.
func pipe(agentReads bool) (mine *os.File, theirs int, err error) {
	var fds [2]int32 // the kernel's int pipefd[2]
	if _, _, e := syscall.RawSyscall(syscall.SYS_PIPE2, uintptr(unsafe.Pointer(&fds)), unix.O_CLOEXEC|unix.O_NONBLOCK, 0); e != 0 {
		return nil, -1, os.NewSyscallError("pipe2", e)
	}
	m, t := int(fds[0]), int(fds[1])
	if !agentReads {
		m, t = t, m
	}
	// A fresh pipe's end has no status flag but O_NONBLOCK (F_SETFL
	// ignores the access mode).
	if _, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(t), syscall.F_SETFL, 0); e != 0 {
		closeRaw(m)
		closeRaw(t)
		return nil, -1, os.NewSyscallError("fcntl", e)
	}
	return os.NewFile(uintptr(m), "|pipe"), t, nil
}

// spares are output pipes made ahead of the commands that take them
// (outputPipe): a start makes the next one's while its command runs, off
// the path of the next request, which then forks sooner. Making a
// command's stdout and stderr pipes (pipe2, fcntl, os.NewFile with its
// poller registration, twice) was one of the larger steps between a
// request and its clone. At most maxSpares are kept: descriptors the
// agent's reserve covers (server's fdBudget keeps 64 and more free for
// what is not a running command's), close-on-exec like every other of
// the agent's.
var spares spareSet

// maxSpares is one command's stdout and stderr.
const maxSpares = 2

type spareSet struct {
	mu    sync.Mutex
	pipes []sparePipe
}

// sparePipe is an output pipe made ahead: the agent's read end and the
// child's (blocking) write end, as pipe(true) returns them.
type sparePipe struct {
	r *os.File
	w int
}

// low reports whether fewer than maxSpares pipes are ready.
func (s *spareSet) low() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pipes) < maxSpares
}

// fill makes pipes until maxSpares are ready.
func (s *spareSet) fill() {
	for s.low() {
		r, w, err := pipe(true)
		if err != nil {
			return
		}
		s.mu.Lock()
		if len(s.pipes) >= maxSpares {
			s.mu.Unlock()
			r.Close()
			closeRaw(w)
			return
		}
		s.pipes = append(s.pipes, sparePipe{r, w})
		s.mu.Unlock()
	}
}

// outputPipe is pipe(true), a spare when one is ready.
func outputPipe() (mine *os.File, theirs int, err error) {
	spares.mu.Lock()
	if n := len(spares.pipes); n > 0 {
		p := spares.pipes[n-1]
		spares.pipes = spares.pipes[:n-1]
		spares.mu.Unlock()
		return p.r, p.w, nil
	}
	spares.mu.Unlock()
	return pipe(true)
}

// cStrings returns a NULL-terminated array of NUL-terminated copies of ss.
func cStrings(ss []string) ([]*byte, error) {
	return syscall.SlicePtrFromStrings(ss)
}

// Start starts spec's process in its own process group (or session, for a
// pty), tagged (tags.go), with spec's rlimits in force before it runs, and
// waits for its exit on its pidfd.
func (r *Runner) Start(spec runner.Spec) (runner.Process, error) {
	p := &proc{done: make(chan struct{})}
	c := &child{step: stepNone, cgTasks: -1, cgCurrent: -1}
	if cg := r.opts.Cgroup; cg != nil {
		c.cgTasks, c.cgCurrent, c.cgMax = cg.Tasks, cg.Current, uint64(max(cg.Max, 0))
	}
	var theirs []int     // the child's descriptors, closed once it started
	var files []*os.File // the same, held as files (the pty's terminal)
	var held []int       // of theirs, kept until the command exits (proc.held)
	closeTheirs := func() {
		for _, fd := range theirs {
			closeRaw(fd)
		}
		for _, f := range files {
			f.Close()
		}
	}
	fail := func(err error) (runner.Process, error) {
		closeTheirs()
		for _, f := range []*os.File{p.stdin, p.stdout, p.stderr} {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	if spec.Pty {
		ptmx, tty, err := openPty(spec.Rows, spec.Cols)
		if err != nil {
			return fail(err)
		}
		files = append(files, tty)
		fd := int(tty.Fd()) // blocking, as the command expects
		c.stdio = [3]int{fd, fd, fd}
		c.setsid, c.ctty = true, true
		p.stdout, p.stdin, p.ptmx = ptmx, ptmx, ptmx
	} else {
		if spec.Stdin {
			w, rd, err := pipe(false)
			if err != nil {
				return fail(err)
			}
			p.stdin = w
			theirs = append(theirs, rd)
			c.stdio[0] = rd
		} else {
			fd, err := devNull()
			if err != nil {
				return fail(&os.PathError{Op: "open", Path: "/dev/null", Err: err})
			}
			c.stdio[0] = fd
		}
		or, ow, err := outputPipe()
		if err != nil {
			return fail(err)
		}
		p.stdout = or
		theirs = append(theirs, ow)
		c.stdio[1] = ow
		er, ew, err := outputPipe()
		if err != nil {
			return fail(err)
		}
		p.stderr = er
		theirs = append(theirs, ew)
		c.stdio[2] = ew
		if spec.HoldOutput {
			held = []int{ow, ew}
		}
	}
	path, err := syscall.BytePtrFromString(spec.Path)
	if err != nil {
		return fail(err)
	}
	dir, err := syscall.BytePtrFromString(spec.Dir)
	if err != nil {
		return fail(err)
	}
	argv, err := cStrings(spec.Args)
	if err != nil {
		return fail(err)
	}
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	envv, err := cStrings(env)
	if err != nil {
		return fail(err)
	}
	c.path, c.dir = uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(dir))
	c.argv, c.envv = uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0]))
	c.sigs = handledSignals()
	c.limits = make([]childLimit, 0, len(spec.Rlimits)+1)
	t := r.procs
	t.mu.Lock() // hold off the reaper and kills until p is registered
	if tag, hard := t.tags.take(); tag != 0 {
		p.tag = tag
		c.limits = append(c.limits, childLimit{resource: tagResource, lim: unix.Rlimit{Cur: tag, Max: hard}, optional: true})
	}
	for _, rl := range spec.Rlimits {
		c.limits = append(c.limits, childLimit{resource: uintptr(rl.Resource), lim: unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}})
	}
	var pid, pidfd int
	if r.opts.Spawn != nil {
		err = r.opts.Spawn(func() error { pid, pidfd, err = spawn(c); return err })
	} else {
		pid, pidfd, err = spawn(c)
	}
	runtime.KeepAlive(path)
	runtime.KeepAlive(dir)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	if err == nil && c.step != stepNone {
		err = c.failure(spec)
		reapFailed(pid, pidfd)
	}
	if err != nil {
		t.mu.Unlock()
		return fail(err)
	}
	p.pid, p.pgid = pid, pid
	p.start = time.Now()
	p.table = t
	// The output pipes' write ends stay open here until the command's
	// process exits (proc.exited closes them; registered under mu, so
	// the reaper cannot see the exit before they are in p.held).
	theirs = slices.DeleteFunc(theirs, func(fd int) bool { return slices.Contains(held, fd) })
	p.held = held
	t.live[pid] = p
	t.mu.Unlock()
	closeTheirs()
	go t.await(p, pidfd)
	if spares.low() {
		go spares.fill()
	}
	return p, nil
}

// failure is the error of a child that failed at c.step.
func (c *child) failure(spec runner.Spec) error {
	if i := c.step - stepLimit; i >= 0 {
		// A limit that cannot be applied is a control not in force: the
		// command does not run without it.
		if len(c.limits) > len(spec.Rlimits) {
			i-- // the tag came first
		}
		if i >= 0 && i < len(spec.Rlimits) {
			return &runner.LimitError{Name: spec.Rlimits[i].Name, Err: c.errno}
		}
	}
	switch c.step {
	case stepDir:
		return &os.PathError{Op: "chdir", Path: spec.Dir, Err: c.errno}
	case stepCgroupFull:
		// The errno is what the clone reported when commands were born
		// in the cgroup; the type says which limit it was (the model is
		// told what to do about it, server/exec.go).
		return &runner.ProcessLimitError{Max: int(c.cgMax), Err: os.NewSyscallError("clone", c.errno)}
	case stepCgroup:
		return os.NewSyscallError("join the commands' cgroup", c.errno)
	}
	return &os.PathError{Op: "fork/exec", Path: spec.Path, Err: c.errno}
}

// spawn clones the child c on the calling thread (which the caller's
// Spawn option may have chosen: one in the commands' cgroup) and returns
// its pid and pidfd. All signals are blocked across the clone: the child
// has no runtime to run a Go signal handler.
func spawn(c *child) (pid, pidfd int, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// No descriptor is being made without close-on-exec meanwhile.
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	all := ^uint64(0)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&c.mask)), 8, 0, 0); e != 0 {
		return 0, -1, os.NewSyscallError("rt_sigprocmask", e)
	}
	var fd int32 = -1
	// Exit signal 0 (the low byte of the flags): see the file comment.
	r1, e := forkChild(c, unix.CLONE_VM|unix.CLONE_VFORK|unix.CLONE_PIDFD, &fd)
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&c.mask)), 0, 8, 0, 0)
	if e != 0 {
		return 0, -1, os.NewSyscallError("clone", syscall.Errno(e))
	}
	return int(r1), int(fd), nil
}

// reapFailed collects a child that exited before its execve.
func reapFailed(pid, pidfd int) {
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, unix.WALL, nil); err != syscall.EINTR {
			break
		}
	}
	if pidfd >= 0 {
		unix.Close(pidfd)
	}
}

// await reaps p once it exits: its pidfd becomes readable then, which the
// runtime's poller reports to this goroutine without a thread of its own.
// The reap runs under mu, so that proc.whileLive holds the PID in place.
// The pidfd is closed with the command's output (proc.Stdout), once the
// server has replied: see closeRaw for why not here.
func (t *procTable) await(p *proc, pidfd int) {
	reaped := func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		if isClosed(p.done) {
			return true // the reaper got it first
		}
		var ws syscall.WaitStatus
		for {
			// WNOHANG: it cannot block, so raw (closeRaw).
			r, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, uintptr(p.pid), uintptr(unsafe.Pointer(&ws)), syscall.WNOHANG|unix.WALL, 0, 0, 0)
			switch {
			case e == syscall.EINTR:
				continue
			case e == 0 && int(r) == p.pid:
			case e == syscall.ECHILD:
				// Not ours to wait for any more (reaped elsewhere):
				// nothing more can be learned of it.
				ws = 0
			default:
				return false // still running
			}
			delete(t.live, p.pid)
			p.exited(ws)
			return true
		}
	}
	// Orphans the command left may have exited with it.
	defer t.reap()
	// Non-blocking, so that os.NewFile hands it to the poller. A pidfd
	// has no other status flag (F_SETFL ignores the access mode): no
	// F_GETFL first.
	syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(pidfd), syscall.F_SETFL, syscall.O_NONBLOCK)
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer p.pidfd.hold(f)
	if rc, err := f.SyscallConn(); err == nil && rc.Read(func(uintptr) bool { return reaped() }) == nil {
		return
	}
	// Not served by the poller: wait blocking for the exit, without
	// reaping (WNOWAIT), outside mu. (Fd puts the descriptor back in
	// blocking mode.)
	fd := int(f.Fd())
	for !reaped() {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT|unix.WALL, nil); err != nil && err != unix.EINTR {
			time.Sleep(10 * time.Millisecond)
		}
	}
}
