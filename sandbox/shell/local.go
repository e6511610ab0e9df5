//go:build unix

package shell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"unsafe"

	"github.com/creack/pty"
)

// LocalStarter starts the process on this machine, unconfined, in a new
// session on a fresh pseudo-terminal (200 columns, 50 rows). It is what the
// tests use, and a backend whose processes run on the host may reuse it. It
// gives no isolation at all: the sandbox backends start bash through the
// in-sandbox agent instead.
//
// Kill signals every process whose session is the shell's, found through
// /proc, so background jobs die with the shell; a process that called setsid
// itself escapes it (inside a sandbox, the sandbox's teardown covers those).
func LocalStarter(ctx context.Context, argv []string, env []string, dir string) (PTY, error) {
	if len(argv) == 0 {
		return nil, errors.New("shell: LocalStarter: empty argv")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		return nil, err
	}
	return &localPTY{f: f, cmd: cmd, sid: cmd.Process.Pid}, nil
}

type localPTY struct {
	f   *os.File // master side; pollable, so Close unblocks a pending Read
	cmd *exec.Cmd
	sid int

	closeOnce sync.Once
}

func (p *localPTY) Write(b []byte) (int, error) { return p.f.Write(b) }

// Read returns io.EOF where Linux reports EIO: every slave descriptor is closed.
func (p *localPTY) Read(b []byte) (int, error) {
	n, err := p.f.Read(b)
	if err != nil && (errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)) {
		err = io.EOF
	}
	return n, err
}

func (p *localPTY) SignalForeground(sig syscall.Signal) error {
	// SyscallConn rather than Fd: Fd would switch the descriptor to blocking
	// mode and Close could no longer interrupt a Read.
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	var pgrp int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return syscall.Kill(-int(pgrp), sig)
}

func (p *localPTY) Kill() error {
	// The shell itself first, so it cannot start anything new while we scan.
	_ = syscall.Kill(p.sid, syscall.SIGKILL)
	for _, pid := range sessionMembers(p.sid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return nil
}

func (p *localPTY) Wait() (int, error) {
	err := p.cmd.Wait()
	code := p.cmd.ProcessState.ExitCode()
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		err = nil
	}
	return code, err
}

// Close releases the master side of the terminal.
func (p *localPTY) Close() error {
	var err error
	p.closeOnce.Do(func() { err = p.f.Close() })
	return err
}

// sessionMembers lists the processes whose session id is sid.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// contain anything: state ppid pgrp session ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(stat[i+1:])
		if len(fields) < 4 {
			continue
		}
		if s, err := strconv.Atoi(string(fields[3])); err == nil && s == sid {
			pids = append(pids, pid)
		}
	}
	return pids
}
