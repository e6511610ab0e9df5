package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
// and has the runner start it.
func (s *server) startProcess(a wire.ExecRequest) (runner.Process, *wire.WireError) {
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
		if p := lookPathIn(path, env); p != "" {
			path = p
		} else {
			return nil, wire.Errorf(wire.CodeNotFound, "program %q not found on the sandbox PATH", a.Args[0])
		}
	}
	p, err := s.runner.Start(runner.Spec{Path: path, Args: a.Args, Env: env, Dir: dir, Stdin: a.Stdin,
		Pty: a.Pty, Rows: a.Rows, Cols: a.Cols, Rlimits: s.hello.Rlimits})
	if err != nil {
		var le *runner.LimitError
		if errors.As(err, &le) {
			return nil, wire.Errorf(wire.CodeExec, "cannot apply %s to %q: %v", le.Name, a.Args[0], le.Err)
		}
		return nil, wire.Errorf(wire.CodeExec, "cannot start %q: %v", a.Args[0], err)
	}
	return p, nil
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
	p, werr := s.startProcess(a)
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
	stdout.Close()
	if stderr != nil {
		stderr.Close()
	}
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
	p           runner.Process
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
	p, werr := s.startProcess(a)
	if werr != nil {
		of.close()
		lease.release()
		return nil, werr
	}
	stdout, stderr := p.Stdout(), p.Stderr()
	lease.started()
	ringBytes := a.RingBytes
	if ringBytes <= 0 {
		ringBytes = 1 << 20
	}
	t := s.jobs
	t.mu.Lock()
	t.next++
	j := &job{id: fmt.Sprintf("job-%d", t.next), args: a.Args, p: p, stdin: p.Stdin(), out: ring{cap: ringBytes}, of: of, done: make(chan struct{})}
	t.jobs[j.id] = j
	t.order = append(t.order, j.id)
	t.pruneLocked()
	t.mu.Unlock()
	var readers sync.WaitGroup
	for _, f := range []*os.File{stdout, stderr} {
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
		case <-p.Done():
		case <-timeout:
			killed = true
			p.Terminate()
		}
		<-p.Done()
		drained := make(chan struct{})
		go func() { readers.Wait(); close(drained) }()
		var left []int
		if killed {
			select {
			case <-drained:
			case <-time.After(drainGrace):
				stopPump(stdout)
				if stderr != nil {
					stopPump(stderr)
				}
				<-drained
			}
		} else {
			left = drainOutput(drained, p)
		}
		stdout.Close()
		if stderr != nil {
			stderr.Close()
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
	return wire.ExecReply{PID: p.PID(), JobID: j.id}, nil
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
	code, sig, start, end := j.p.Exit()
	st := wire.JobStatus{ID: j.id, Args: j.args, PID: j.p.PID(), StartedNs: start.UnixNano(), Written: j.out.written,
		OutputFileReport: j.of.report()}
	if isClosed(j.done) {
		st.LeftRunning = j.leftRunning
		st.ExitCode, st.Signal = code, sig
		st.EndedNs = end.UnixNano()
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

func (t *jobTable) signal(id string, sig int) (any, *wire.WireError) {
	j, werr := t.get(id)
	if werr != nil {
		return nil, werr
	}
	if sig == 0 {
		sig = sigKill
	}
	if sig == sigKill || sig == sigTerm {
		go terminateJob(j, sig)
	} else {
		j.p.SignalTree(sig)
	}
	return struct{}{}, nil
}

func terminateJob(j *job, sig int) {
	if sig == sigKill {
		j.p.SignalTree(sigKill)
		return
	}
	j.p.Terminate()
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
		j.p.SignalTree(sigKill)
	}
	for _, j := range js {
		select {
		case <-j.done:
		case <-time.After(2 * time.Second):
		}
	}
}

var _ = io.EOF
