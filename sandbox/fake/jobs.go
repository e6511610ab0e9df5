package fake

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// A scripted background job: its reply's output is all there at once; a
// Hang reply keeps it running until it is killed or its timeout passes.
type job struct {
	id      string
	args    []string
	pid     int
	started time.Time

	mu      sync.Mutex
	out     []byte
	ended   time.Time
	code    int
	signal  string
	stdin   bool
	done    chan struct{}
	endOnce sync.Once
}

func (j *job) end(code int, sig string) {
	j.endOnce.Do(func() {
		j.mu.Lock()
		j.code, j.signal, j.ended, j.stdin = code, sig, time.Now(), false
		j.mu.Unlock()
		close(j.done)
	})
}

func (j *job) statusLocked() wire.JobStatus {
	st := wire.JobStatus{ID: j.id, Args: j.args, PID: j.pid, StartedNs: j.started.UnixNano(), Written: int64(len(j.out))}
	select {
	case <-j.done:
		st.ExitCode, st.Signal, st.EndedNs = j.code, j.signal, j.ended.UnixNano()
	default:
		st.Running = true
	}
	return st
}

type jobTable struct {
	mu    sync.Mutex
	next  int
	jobs  map[string]*job
	order []string
}

func newJobTable() *jobTable { return &jobTable{jobs: map[string]*job{}} }

func (t *jobTable) get(id string) (*job, *wire.WireError) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[id]
	if j == nil {
		return nil, werr(wire.CodeNotFound, "no background job %q: list jobs to see the ids that exist", id)
	}
	return j, nil
}

func (t *jobTable) endAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range t.jobs {
		j.end(128+9, "SIGKILL")
	}
}

func (s *server) startJob(a wire.ExecRequest, dir string) (any, *wire.WireError) {
	text := commandText(a.Args)
	timeout := time.Duration(a.TimeoutMs) * time.Millisecond
	idx := s.fk.rec.add(Call{Kind: KindJob, Op: "exec", Text: text, Args: a.Args, Dir: a.Dir, Env: a.Env, Policy: s.fk.policy(timeout, a.Env)})
	f, ok := find(&s.fk.Script.mu, s.fk.Script.commands, text)
	if !ok {
		msg := unscripted("command", text)
		s.fk.unscripted(msg)
		s.fk.rec.setErr(idx, string(wire.CodeNotFound))
		return nil, werr(wire.CodeNotFound, "%s", msg)
	}
	s.fk.rec.markScripted(idx)
	rep := f(context.Background(), Exec{Text: text, Args: a.Args, Dir: dir, Env: a.Env, Workspace: &Workspace{s.fs}})
	t := s.jobs
	t.mu.Lock()
	t.next++
	j := &job{id: fmt.Sprintf("job-%d", t.next), args: a.Args, pid: s.pid(), started: time.Now(),
		out: []byte(rep.Stdout + rep.Stderr), stdin: a.Stdin, done: make(chan struct{})}
	t.jobs[j.id] = j
	t.order = append(t.order, j.id)
	t.mu.Unlock()
	if !rep.Hang {
		j.end(rep.ExitCode, "")
	} else if timeout > 0 {
		go func() {
			tm := time.NewTimer(timeout)
			defer tm.Stop()
			select {
			case <-tm.C:
				j.end(128+15, "SIGTERM")
			case <-j.done:
			}
		}()
	}
	return wire.ExecReply{PID: j.pid, JobID: j.id}, nil
}

func (s *server) jobOp(r *request, req wire.Request) (any, *wire.WireError) {
	t := s.jobs
	c := Call{Kind: KindJob, Op: req.Op, Scripted: true, Policy: s.fk.policy(0, nil)}
	res, e := func() (any, *wire.WireError) {
		switch req.Op {
		case "job.list":
			t.mu.Lock()
			defer t.mu.Unlock()
			out := make([]wire.JobStatus, 0, len(t.order))
			for _, id := range t.order {
				j := t.jobs[id]
				j.mu.Lock()
				out = append(out, j.statusLocked())
				j.mu.Unlock()
			}
			return out, nil
		case "job.output":
			a, e := decodeArgs[wire.JobOutputRequest](req)
			if e != nil {
				return nil, e
			}
			c.Text = a.ID
			j, e := t.get(a.ID)
			if e != nil {
				return nil, e
			}
			j.mu.Lock()
			defer j.mu.Unlock()
			since := min(max(a.Since, 0), int64(len(j.out)))
			end := int64(len(j.out))
			if limit := a.Max; limit > 0 && end-since > int64(limit) {
				end = since + int64(limit)
			}
			return wire.JobOutput{Data: append([]byte(nil), j.out[since:end]...), Next: end, Status: j.statusLocked()}, nil
		case "job.stdin":
			a, e := decodeArgs[wire.JobStdinRequest](req)
			if e != nil {
				return nil, e
			}
			c.Text = a.ID
			j, e := t.get(a.ID)
			if e != nil {
				return nil, e
			}
			j.mu.Lock()
			defer j.mu.Unlock()
			if !j.stdin {
				return nil, werr(wire.CodeInvalidArgument, "job %s has no open stdin (start it with stdin enabled; it may have been closed or the job ended)", a.ID)
			}
			if a.Close {
				j.stdin = false
			}
			return struct{}{}, nil
		}
		a, e := decodeArgs[wire.JobRef](req)
		if e != nil {
			return nil, e
		}
		var sig int
		if req.Op == "job.kill" {
			ka, e := decodeArgs[wire.JobSignalRequest](req)
			if e != nil {
				return nil, e
			}
			a.ID, sig = ka.ID, ka.Signal
		}
		c.Text = a.ID
		j, e := t.get(a.ID)
		if e != nil {
			return nil, e
		}
		switch req.Op {
		case "job.status":
		case "job.wait":
			select {
			case <-j.done:
			case <-r.ctx.Done():
				return nil, werr(wire.CodeCanceled, "wait for job %s abandoned", a.ID)
			}
		case "job.kill":
			if sig == 0 {
				sig = int(syscall.SIGKILL)
			}
			if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGTERM) {
				j.end(128+sig, map[int]string{9: "SIGKILL", 15: "SIGTERM"}[sig])
			}
			return struct{}{}, nil
		case "job.remove":
			select {
			case <-j.done:
			default:
				return nil, werr(wire.CodeInvalidArgument, "job %s is still running: kill it first", a.ID)
			}
			t.mu.Lock()
			delete(t.jobs, a.ID)
			for i, o := range t.order {
				if o == a.ID {
					t.order = append(t.order[:i], t.order[i+1:]...)
					break
				}
			}
			t.mu.Unlock()
			return struct{}{}, nil
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.statusLocked(), nil
	}()
	if e != nil {
		c.Err = string(e.Code)
	}
	s.fk.rec.add(c)
	return res, e
}
