package server

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Background jobs (ExecRequest.Job): a process whose output goes to a ring
// the client polls (job.output) instead of streaming, and the table of
// jobs the job.* operations address.

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
	stdin       io.WriteCloser
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
	p, werr := s.startProcess(a, lease.holdOutput)
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
	for _, f := range []runner.Output{stdout, stderr} {
		if f == nil {
			continue
		}
		readers.Add(1)
		go func(f runner.Output) {
			defer readers.Done()
			pump(f, func(b []byte) {
				of.write(b)
				j.mu.Lock()
				j.out.write(b)
				j.mu.Unlock()
			})
		}(f)
	}
	// Armed before the reply: the job's time runs from its start, and a
	// clock moved right after Start (the fake's) finds the timer there.
	timeout, stop := s.timeoutOf(a)
	go func() {
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
