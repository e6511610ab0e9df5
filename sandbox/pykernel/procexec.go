//go:build unix

package pykernel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
)

// ExecProc is a Starter that runs the driver on this machine with os/exec,
// in a process group of its own so that Signal and Kill reach every process
// the code started. It confines nothing: it is for tests and for trusted
// code; sandboxes start the driver through their agent instead.
func ExecProc(ctx context.Context, argv []string, env []string, dir string) (Proc, error) {
	if len(argv) == 0 {
		return nil, errors.New("pykernel: ExecProc: empty argv")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = append([]string{}, env...) // non-nil: never inherit this process's environment
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pykernel: ExecProc: %w", err)
	}
	return &execProc{cmd: cmd, stdin: stdin, stdout: stdout}, nil
}

type execProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader

	once sync.Once
	code int
	err  error
}

// PID returns the process id: ExecProc's processes can host forked
// contexts (Options.Imports).
func (p *execProc) PID() int { return p.cmd.Process.Pid }

func (p *execProc) Stdin() io.Writer  { return p.stdin }
func (p *execProc) Stdout() io.Reader { return p.stdout }

// Signal signals the whole process group.
func (p *execProc) Signal(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Kill kills the whole process group.
func (p *execProc) Kill() error {
	err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Wait reaps the driver; it also closes both pipes, which ends pending reads
// and writes.
func (p *execProc) Wait() (int, error) {
	p.once.Do(func() {
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = nil // a non-zero exit is reported by the code
		}
		p.err = err
	})
	return p.code, p.err
}
