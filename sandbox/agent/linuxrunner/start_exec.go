//go:build linux && !amd64

package linuxrunner

// The start of a command where the runner has no clone of its own
// (start_clone.go is amd64 only): os/exec forks it, and its rlimits are
// applied with prlimit once it runs. That leaves a window: until the
// limits land, the command may fork, and a child that exits its tree in
// that window (a double fork) keeps running unlimited.

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// notifyExits: os/exec's children end with SIGCHLD, and the reaper,
// woken by it, is what sees them exit.
const notifyExits = true

// quietSignals does nothing here: the reaper needs SIGCHLD (notifyExits),
// and os/exec's child resets the handlers itself.
func quietSignals() {}

// Start starts spec's process in its own process group (or session, for a
// pty), tagged (tags.go), with spec's rlimits, and registers it with the
// reaper.
func (r *Runner) Start(spec runner.Spec) (runner.Process, error) {
	cmd := &exec.Cmd{Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir}
	p := &proc{done: make(chan struct{})}
	var closeAfter []*os.File
	fail := func(err error) (runner.Process, error) {
		for _, f := range closeAfter {
			f.Close()
		}
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
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		closeAfter = append(closeAfter, tty)
		p.stdout = ptmx
		p.stdin = ptmx
		p.ptmx = ptmx
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if spec.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			cmd.Stdin = r
			closeAfter = append(closeAfter, r)
			p.stdin = w
		}
		or, ow, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		cmd.Stdout = ow
		closeAfter = append(closeAfter, ow)
		p.stdout = or
		er, ew, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		cmd.Stderr = ew
		closeAfter = append(closeAfter, ew)
		p.stderr = er
	}
	t := r.procs
	t.mu.Lock() // hold off the reaper until p is registered
	p.tag = t.tags.arm()
	var err error
	start := cmd.Start
	if cg := r.opts.Cgroup; cg != nil {
		// os/exec runs nothing of ours in the child: the command is
		// forked by a thread in the cgroup.
		start = func() error { return cg.Spawn(cmd.Start) }
	}
	if r.opts.Spawn != nil {
		err = r.opts.Spawn(start)
	} else {
		err = start()
	}
	t.tags.disarm()
	if err != nil {
		t.mu.Unlock()
		return fail(err)
	}
	p.pid = cmd.Process.Pid
	p.pgid = p.pid
	p.start = time.Now()
	t.mu.Unlock()
	t.register(p)
	_ = cmd.Process.Release()
	for _, rl := range spec.Rlimits {
		lim := unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}
		if err := unix.Prlimit(p.pid, rl.Resource, &lim, nil); err != nil && err != unix.ESRCH {
			// A limit that cannot be applied is a control not in force:
			// refuse to let the process run without it.
			killTree(p, syscall.SIGKILL)
			return fail(&runner.LimitError{Name: rl.Name, Err: err})
		}
	}
	if len(spec.Rlimits) > 0 {
		limitForked(p.pid, spec.Rlimits, 0)
	}
	for _, f := range closeAfter {
		f.Close()
	}
	return p, nil
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
			_ = unix.Prlimit(c, rl.Resource, &lim, nil) // ESRCH: it is gone already
		}
		limitForked(c, rls, depth+1)
	}
}
