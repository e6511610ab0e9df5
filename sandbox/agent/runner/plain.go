package runner

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Plain returns a runner that starts processes with os/exec and controls
// only the process it started: no process groups, no rlimits (a Spec with
// Rlimits is refused), no terminal (a Spec with Pty is refused), and a
// kill does not reach what the process started. It is the agent's
// default where the agent serves no sandbox (macOS, Windows), so that the
// server builds and runs everywhere; sandboxes run the Linux runner.
func Plain() Runner { return &plain{live: map[*plainProc]bool{}} }

type plain struct {
	mu   sync.Mutex
	live map[*plainProc]bool
}

type plainProc struct {
	r                     *plain
	cmd                   *exec.Cmd
	stdin, stdout, stderr *os.File
	done                  chan struct{}
	code                  int
	signal                string
	start, end            time.Time
}

// plainGrace is how long Terminate waits between asking and killing.
const plainGrace = 300 * time.Millisecond

func (r *plain) Begin() (end func()) { return r.KillAll }

func (r *plain) KillAll() {
	r.mu.Lock()
	ps := make([]*plainProc, 0, len(r.live))
	for p := range r.live {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		_ = p.cmd.Process.Kill()
	}
}

func (r *plain) Start(spec Spec) (Process, error) {
	if spec.Pty {
		return nil, ErrUnsupported
	}
	if len(spec.Rlimits) > 0 {
		return nil, &LimitError{Name: spec.Rlimits[0].Name, Err: ErrUnsupported}
	}
	cmd := &exec.Cmd{Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir}
	p := &plainProc{r: r, cmd: cmd, done: make(chan struct{})}
	var child []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	pipe := func() (rd, wr *os.File, err error) {
		rd, wr, err = os.Pipe()
		return rd, wr, err
	}
	var err error
	if spec.Stdin {
		var rd *os.File
		if rd, p.stdin, err = pipe(); err != nil {
			return nil, err
		}
		cmd.Stdin = rd
		child = append(child, rd)
	}
	var ow, ew *os.File
	if p.stdout, ow, err = pipe(); err == nil {
		child = append(child, ow)
		if p.stderr, ew, err = pipe(); err == nil {
			child = append(child, ew)
		}
	}
	if err != nil {
		closeAll(child)
		closeAll([]*os.File{p.stdin, p.stdout, p.stderr})
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = ow, ew
	if err := cmd.Start(); err != nil {
		closeAll(child)
		closeAll([]*os.File{p.stdin, p.stdout, p.stderr})
		return nil, err
	}
	p.start = time.Now()
	closeAll(child)
	r.mu.Lock()
	r.live[p] = true
	r.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		p.end = time.Now()
		p.code, p.signal = exitOf(cmd.ProcessState)
		r.mu.Lock()
		delete(r.live, p)
		r.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *plainProc) PID() int { return p.cmd.Process.Pid }
func (p *plainProc) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil // an untyped nil: the server tests for it
	}
	return p.stdin
}
func (p *plainProc) Stdout() Output { return p.stdout }
func (p *plainProc) Stderr() Output {
	if p.stderr == nil {
		return nil
	}
	return p.stderr
}
func (p *plainProc) Done() <-chan struct{} { return p.done }

func (p *plainProc) Exit() (int, string, time.Time, time.Time) {
	return p.code, p.signal, p.start, p.end
}

func (p *plainProc) Signal(sr wire.SignalRequest) { p.SignalTree(sr.Signal) }

func (p *plainProc) SignalTree(sig int) {
	if sig == 9 {
		_ = p.cmd.Process.Kill()
		return
	}
	_ = p.cmd.Process.Signal(syscall.Signal(sig))
}

func (p *plainProc) Terminate() int {
	if p.cmd.Process.Signal(syscall.Signal(15)) == nil {
		select {
		case <-p.done:
			return 0
		case <-time.After(plainGrace):
		}
	}
	_ = p.cmd.Process.Kill()
	return 0
}

func (p *plainProc) Survivors() []int     { return nil }
func (p *plainProc) OutputHolders() []int { return nil }
