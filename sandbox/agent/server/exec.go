package server

// Commands (op exec): a request checked and resolved here, started by the
// Runner, its output streamed with the caps of output.go; background jobs
// are jobs.go.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// drainGrace is how long after a command's main process exits the agent
// waits for the end of its output before it checks who still holds the
// pipes (drainOutput): a background child holding them open must not make
// the call hang, while output the command printed is read to its end
// however slowly the caller takes it. After a kill it bounds the wait.
const drainGrace = 200 * time.Millisecond

func (s *server) resolveDir(dir string) (string, *wire.WireError) {
	rel, werr := s.ws.rel(dir)
	if werr != nil {
		return "", werr
	}
	if rel == "." {
		// The workspace itself, a directory the agent holds open: no
		// stat (a system call the runtime is told of, see readRaw). Were
		// it gone, the start would fail at its chdir instead.
		return filepath.Join(s.ws.host, rel), nil
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

// Signal numbers the server itself sends (Linux's, as on the wire).
const (
	sigKill = 9
	sigTerm = 15
)

// startProcess checks and resolves a (program, directory, environment)
// and has the runner start it; holdOutput is runner.Spec.HoldOutput (the
// command's descriptor lease covers it: fdLease.holdOutput).
func (s *server) startProcess(a wire.ExecRequest, holdOutput bool) (runner.Process, *wire.WireError) {
	if s.processesReady != nil {
		<-s.processesReady
	}
	if len(a.Args) == 0 || a.Args[0] == "" {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "exec needs a program to run (args is empty)")
	}
	dir, werr := s.resolveDir(a.Dir)
	if werr != nil {
		return nil, werr
	}
	env := mergeEnv(s.hello.Env, a.Env)
	path := a.Args[0]
	if !strings.Contains(path, "/") {
		if p := s.lookPath(path, env); p != "" {
			path = p
		} else {
			return nil, wire.Errorf(wire.CodeNotFound, "program %q not found on the sandbox PATH", a.Args[0])
		}
	}
	p, err := s.runner.Start(runner.Spec{Path: path, Args: a.Args, Env: env, Dir: dir, Stdin: a.Stdin,
		Pty: a.Pty, Rows: a.Rows, Cols: a.Cols, Rlimits: s.hello.Rlimits, HoldOutput: holdOutput, Request: a})
	if err != nil {
		var we *wire.WireError
		if errors.As(err, &we) {
			return nil, we // the runner's own coded refusal
		}
		// A refused start at the process limit: the child found the
		// commands' cgroup full (linux/amd64), or the kernel refused the
		// fork (EAGAIN, the os/exec start). Said in tool terms, with the
		// way out: it used to read "cannot start "true": clone: resource
		// temporarily unavailable" (found in review).
		var pe *runner.ProcessLimitError
		if errors.As(err, &pe) || errors.Is(err, syscall.EAGAIN) {
			limit, cause := "its process limit", err
			if pe != nil {
				cause = pe.Err
				if pe.Max > 0 {
					limit = fmt.Sprintf("its process limit (%d)", pe.Max)
				}
			}
			return nil, wire.Errorf(wire.CodeBusy, "cannot start %q: the sandbox already runs as many processes as %s allows; stop background jobs (stop_background) or processes you started that you no longer need, then run this again (%v)", a.Args[0], limit, cause)
		}
		var le *runner.LimitError
		if errors.As(err, &le) {
			return nil, wire.Errorf(wire.CodeExec, "cannot apply %s to %q: %v", le.Name, a.Args[0], le.Err)
		}
		return nil, wire.Errorf(wire.CodeExec, "cannot start %q: %v", a.Args[0], err)
	}
	return p, nil
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
	p, werr := s.startProcess(a, lease.holdOutput)
	if werr != nil {
		of.close()
		return nil, werr
	}
	lease.started()
	if a.Events {
		r.event(wire.Event{Kind: "started", PID: p.PID()})
	}
	r.setSignalHandler(p.Signal)
	stdin, stdout, stderr := p.Stdin(), p.Stdout(), p.Stderr()
	outCap, errCap := newCapture(a.MaxOutput), newCapture(a.MaxOutput)
	var readers sync.WaitGroup
	streamTo := func(f runner.Output, t wire.FrameType, c *capture) {
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
	streamTo(stdout, wire.FrameStdout, outCap)
	if stderr != nil {
		streamTo(stderr, wire.FrameStderr, errCap)
	}
	if stdin != nil && !a.Pty {
		go func() {
			for {
				b, ok := r.readInput()
				if !ok {
					stdin.Close()
					return
				}
				if _, err := stdin.Write(b); err != nil {
					// The process closed its stdin; keep acknowledging input.
					for {
						if _, ok := r.readInput(); !ok {
							stdin.Close()
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
				_, _ = stdin.Write(b)
			}
		}()
	}
	timeout, stop := s.timeoutOf(a)
	defer stop()
	rep := wire.ExecReply{PID: p.PID()}
	select {
	case <-p.Done():
	case <-timeout:
		rep.TimedOut = true
		rep.Killed = p.Terminate()
	case <-r.ctx.Done():
		rep.Canceled = true
		rep.Killed = p.Terminate()
	}
	<-p.Done()
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	if rep.TimedOut || rep.Canceled || a.Pty {
		// Killed, or a terminal: output is not owed past the grace. On a
		// pty, what still holds the terminal once the shell is gone is a
		// job it left behind (the runner's kill reaches it: linuxrunner's killTree).
		select {
		case <-drained:
		case <-time.After(drainGrace):
			p.SignalTree(sigKill)
			stopPump(stdout)
			if stderr != nil {
				stopPump(stderr)
			}
			<-drained
		}
	} else {
		// Everything the command printed before it exited is in the
		// pipes: read it all, however slowly the caller takes it.
		rep.LeftRunning = drainOutput(drained, p)
	}
	// Closed once the reply is out: a close is a system call the runtime
	// is told of, which would wake its monitor before the reply (readRaw).
	r.after = append(r.after, func() {
		stdout.Close()
		if stderr != nil {
			stderr.Close()
		}
	})
	rep.OutputFileReport = of.close()
	if rep.TimedOut || rep.Canceled {
		rep.Survivors = p.Survivors()
	}
	var start, end time.Time
	rep.ExitCode, rep.Signal, start, end = p.Exit()
	rep.DurationNs = end.Sub(start).Nanoseconds()
	rep.StdoutTail, rep.StdoutDropped = outCap.tail, outCap.dropped
	rep.StderrTail, rep.StderrDropped = errCap.tail, errCap.dropped
	return rep, nil
}
