package fake

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
)

// server is the fake agent: it speaks the real agent protocol (package
// sandbox/agent) over an in-memory stream, serves file requests from the
// in-memory workspace, and answers everything that would run a process
// from the script. It starts no process.
type server struct {
	conn io.ReadWriteCloser
	fk   *Fake
	fs   *memFS

	wmu   sync.Mutex
	dead  bool
	hello agent.Hello

	mu       sync.Mutex
	reqs     map[uint32]*request
	handlers sync.WaitGroup
	nextPID  int
	jobs     *jobTable
}

// request is the fake agent's state of one in-flight request, with the
// same per-request flow control as the real agent.
type request struct {
	id     uint32
	s      *server
	ctx    context.Context
	cancel context.CancelFunc

	cmu    sync.Mutex
	cond   *sync.Cond
	credit int

	in      chan []byte
	inOnce  sync.Once
	pending []byte // read but not yet consumed by Read

	sigMu    sync.Mutex
	onSignal func(agent.SignalRequest)
}

const chunkSize = 32 << 10

func newServer(conn io.ReadWriteCloser, fk *Fake, fs *memFS) *server {
	return &server{conn: conn, fk: fk, fs: fs, reqs: map[uint32]*request{}, nextPID: 100, jobs: newJobTable()}
}

func (s *server) send(id uint32, t agent.FrameType, payload []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.dead {
		return io.ErrClosedPipe
	}
	if err := agent.WriteFrame(s.conn, id, t, payload); err != nil {
		s.dead = true
		return err
	}
	return nil
}

func (s *server) reply(id uint32, v any) error {
	b, _ := json.Marshal(v)
	return s.send(id, agent.FrameReply, b)
}

func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextPID++
	return s.nextPID
}

// serve runs until the stream closes, then ends every request.
func (s *server) serve() error {
	defer s.shutdown()
	f, err := agent.ReadFrame(s.conn)
	if err != nil {
		return err
	}
	if f.Type != agent.FrameHello {
		return fmt.Errorf("%w: first frame is %s, want hello", agent.ErrProtocol, f.Type)
	}
	if err := json.Unmarshal(f.Payload, &s.hello); err != nil {
		return fmt.Errorf("%w: bad hello: %v", agent.ErrProtocol, err)
	}
	s.fk.mu.Lock()
	s.fk.env = s.hello.Env
	s.fk.mu.Unlock()
	s.fs.mu.Lock()
	s.fs.dir = s.hello.Workspace
	s.fs.fsize, s.fs.disk = s.hello.FileSizeBytes, s.hello.DiskBytes
	s.fs.mu.Unlock()
	rep := agent.HelloReply{Version: agent.Version, PID: 1, PID1: true, UID: 1000, Hostname: "fake"}
	if !s.fk.cfg.noPython {
		rep.Python = "/usr/bin/python3"
	}
	if !s.fk.cfg.noBash {
		rep.Bash = "/bin/bash"
	}
	res, _ := json.Marshal(rep)
	msg, _ := json.Marshal(agent.Reply{Result: res})
	if err := s.send(0, agent.FrameHelloOK, msg); err != nil {
		return err
	}
	for {
		f, err := agent.ReadFrame(s.conn)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
				return nil
			}
			return err
		}
		if err := s.dispatch(f); err != nil {
			return err
		}
	}
}

func (s *server) shutdown() {
	s.wmu.Lock()
	s.dead = true
	s.wmu.Unlock()
	s.conn.Close()
	s.mu.Lock()
	for _, r := range s.reqs {
		r.cancel()
	}
	s.mu.Unlock()
	s.jobs.endAll()
	s.handlers.Wait()
}

func (s *server) dispatch(f agent.Frame) error {
	switch f.Type {
	case agent.FrameRequest:
		var req agent.Request
		if err := json.Unmarshal(f.Payload, &req); err != nil {
			return s.reply(f.ID, agent.Reply{Error: werr(agent.CodeInvalidArgument, "malformed request: %v", err)})
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &request{id: f.ID, s: s, ctx: ctx, cancel: cancel, credit: agent.Window, in: make(chan []byte, agent.Window/chunkSize+8)}
		r.cond = sync.NewCond(&r.cmu)
		s.mu.Lock()
		if _, dup := s.reqs[f.ID]; dup {
			s.mu.Unlock()
			cancel()
			return fmt.Errorf("%w: duplicate request id %d", agent.ErrProtocol, f.ID)
		}
		s.reqs[f.ID] = r
		s.handlers.Add(1)
		s.mu.Unlock()
		go s.handle(r, req)
	case agent.FrameStdin, agent.FrameStdinClose, agent.FrameCancel, agent.FrameSignal, agent.FrameAck:
		s.mu.Lock()
		r := s.reqs[f.ID]
		s.mu.Unlock()
		if r == nil {
			return nil
		}
		switch f.Type {
		case agent.FrameStdin:
			select {
			case r.in <- f.Payload:
			default:
				return fmt.Errorf("%w: request %d sent past its flow-control window", agent.ErrProtocol, f.ID)
			}
		case agent.FrameStdinClose:
			r.inOnce.Do(func() { close(r.in) })
		case agent.FrameCancel:
			r.cancel()
		case agent.FrameSignal:
			var sr agent.SignalRequest
			if err := json.Unmarshal(f.Payload, &sr); err != nil {
				return fmt.Errorf("%w: bad signal frame: %v", agent.ErrProtocol, err)
			}
			r.sigMu.Lock()
			h := r.onSignal
			r.sigMu.Unlock()
			if h != nil {
				h(sr)
			}
		case agent.FrameAck:
			if len(f.Payload) != 4 {
				return fmt.Errorf("%w: ack of %d bytes", agent.ErrProtocol, len(f.Payload))
			}
			r.cmu.Lock()
			r.credit += int(binary.BigEndian.Uint32(f.Payload))
			r.cond.Broadcast()
			r.cmu.Unlock()
		}
	default:
		return fmt.Errorf("%w: unexpected %s frame from client", agent.ErrProtocol, f.Type)
	}
	return nil
}

func (r *request) setSignalHandler(h func(agent.SignalRequest)) {
	r.sigMu.Lock()
	r.onSignal = h
	r.sigMu.Unlock()
}

// readInput returns the next inbound chunk, returning its credit.
func (r *request) readInput() ([]byte, bool) {
	select {
	case b, ok := <-r.in:
		if !ok {
			return nil, false
		}
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], uint32(len(b)))
		_ = r.s.send(r.id, agent.FrameAck, a[:])
		return b, true
	case <-r.ctx.Done():
		return nil, false
	}
}

// Read makes the request's inbound data an io.Reader (one reader only).
func (r *request) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		b, ok := r.readInput()
		if !ok {
			if r.ctx.Err() != nil {
				return 0, context.Canceled
			}
			return 0, io.EOF
		}
		r.pending = b
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// sendData streams bytes to the client in chunks within the credit.
func (r *request) sendData(t agent.FrameType, b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), chunkSize)
		r.cmu.Lock()
		for r.credit < n && r.ctx.Err() == nil {
			if r.credit > 0 {
				n = r.credit
				break
			}
			r.cond.Wait()
		}
		if r.ctx.Err() != nil {
			r.cmu.Unlock()
			return false
		}
		r.credit -= n
		r.cmu.Unlock()
		if err := r.s.send(r.id, t, b[:n]); err != nil {
			return false
		}
		b = b[n:]
	}
	return true
}

// Write streams p as stdout data (for tar output).
func (r *request) Write(p []byte) (int, error) {
	if !r.sendData(agent.FrameStdout, p) {
		return 0, context.Canceled
	}
	return len(p), nil
}

func (r *request) event(e agent.Event) {
	b, _ := json.Marshal(e)
	_ = r.s.send(r.id, agent.FrameEvent, b)
}

func (s *server) handle(r *request, req agent.Request) {
	defer s.handlers.Done()
	stop := context.AfterFunc(r.ctx, func() {
		r.cmu.Lock()
		r.cond.Broadcast()
		r.cmu.Unlock()
	})
	defer stop()
	var result any
	var we *agent.WireError
	func() {
		defer func() {
			if p := recover(); p != nil {
				we = werr(agent.CodeInternal, "fake agent failed while handling %q: %v", req.Op, p)
			}
		}()
		result, we = s.call(r, req)
	}()
	var rep agent.Reply
	if we != nil {
		rep.Error = we
	} else if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			rep.Error = werr(agent.CodeInternal, "encoding reply: %v", err)
		} else {
			rep.Result = b
		}
	}
	s.mu.Lock()
	delete(s.reqs, r.id)
	s.mu.Unlock()
	r.cancel()
	_ = s.reply(r.id, rep)
}

func decodeArgs[T any](req agent.Request) (T, *agent.WireError) {
	var v T
	if len(req.Args) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(req.Args, &v); err != nil {
		return v, werr(agent.CodeInvalidArgument, "bad arguments for %s: %v", req.Op, err)
	}
	return v, nil
}

func (s *server) call(r *request, req agent.Request) (any, *agent.WireError) {
	switch req.Op {
	case "ping":
		return struct{}{}, nil
	case "exec":
		a, e := decodeArgs[agent.ExecRequest](req)
		if e != nil {
			return nil, e
		}
		return s.exec(r, a)
	case "job.output", "job.status", "job.wait", "job.kill", "job.stdin", "job.list", "job.remove":
		return s.jobOp(r, req)
	}
	if strings.HasPrefix(req.Op, "fs.") {
		return s.fileOp(r, req)
	}
	return nil, werr(agent.CodeInvalidArgument, "unknown operation %q", req.Op)
}

// fileOp serves a file request from the workspace and records it.
func (s *server) fileOp(r *request, req agent.Request) (any, *agent.WireError) {
	var res any
	var e *agent.WireError
	c := Call{Kind: KindFile, Op: req.Op, Scripted: true, Policy: s.fk.policy(0, nil)}
	switch req.Op {
	case "fs.read":
		a, de := decodeArgs[agent.FSReadRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.read(a)
	case "fs.write":
		a, de := decodeArgs[agent.FSWriteRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.write(a)
	case "fs.edit":
		a, de := decodeArgs[agent.FSEditRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.edit(a)
	case "fs.stat", "fs.mkdir", "fs.remove", "fs.copyin", "fs.copyout":
		a, de := decodeArgs[agent.FSPathRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		switch req.Op {
		case "fs.stat":
			res, e = s.fs.stat(a.Path)
		case "fs.mkdir":
			res, e = s.fs.mkdir(a.Path)
		case "fs.remove":
			res, e = s.fs.remove(a)
		case "fs.copyin":
			res, e = s.fs.copyIn(a.Path, r)
		case "fs.copyout":
			res, e = s.fs.copyOut(a.Path, r)
		}
	case "fs.list":
		a, de := decodeArgs[agent.FSListRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.list(a)
	case "fs.move", "fs.copy":
		a, de := decodeArgs[agent.FSMoveRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text, c.Args = a.From, []string{a.From, a.To}
		if req.Op == "fs.move" {
			res, e = s.fs.move(a)
		} else {
			res, e = s.fs.copy(a)
		}
	case "fs.chmod":
		a, de := decodeArgs[agent.FSChmodRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.chmod(a)
	case "fs.search":
		a, de := decodeArgs[agent.FSSearchRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Pattern
		c.Args = []string{a.Pattern, a.Path}
		res, e = s.fs.search(r.ctx, a)
	case "fs.glob":
		a, de := decodeArgs[agent.FSGlobRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Pattern
		c.Args = []string{a.Pattern, a.Path}
		res, e = s.fs.glob(a)
	default:
		return nil, werr(agent.CodeInvalidArgument, "unknown operation %q", req.Op)
	}
	if e != nil {
		c.Err = "SBX_" + e.Code
	}
	s.fk.rec.add(c)
	return res, e
}

// resolveDir checks a command's working directory as the agent does.
func (s *server) resolveDir(dir string) (string, *agent.WireError) {
	s.fs.mu.Lock()
	defer s.fs.mu.Unlock()
	rel, e := s.fs.rel(dir)
	if e != nil {
		return "", e
	}
	n, err := s.fs.lookup(rel, true)
	if err != nil {
		return "", fsError(dir, err)
	}
	if n.kind != kindDir {
		return "", werr(agent.CodeNotDir, "working directory %q is not a directory", dir)
	}
	return rel, nil
}

func isKernel(a agent.ExecRequest) bool {
	return a.Stdin && !a.Pty && len(a.Args) == 4 && a.Args[1] == "-u" && a.Args[2] == "-c" && strings.Contains(a.Args[3], "<sandboxkit-driver>")
}

func isShell(a agent.ExecRequest) bool {
	return a.Pty && len(a.Args) >= 2 && strings.Join(a.Args[1:], " ") == "--norc --noprofile --noediting -i"
}

func (s *server) exec(r *request, a agent.ExecRequest) (any, *agent.WireError) {
	if len(a.Args) == 0 || a.Args[0] == "" {
		return nil, werr(agent.CodeInvalidArgument, "exec needs a program to run (args is empty)")
	}
	dir, e := s.resolveDir(a.Dir)
	if e != nil {
		return nil, e
	}
	switch {
	case isKernel(a):
		return s.serveKernel(r, a)
	case isShell(a):
		return s.serveShell(r, a, dir)
	case a.Job:
		return s.startJob(a, dir)
	}
	return s.runCommand(r, a, dir)
}

func (s *server) runCommand(r *request, a agent.ExecRequest, dir string) (any, *agent.WireError) {
	text := commandText(a.Args)
	timeout := time.Duration(a.TimeoutMs) * time.Millisecond
	idx := s.fk.rec.add(Call{Kind: KindCommand, Op: "exec", Text: text, Args: a.Args, Dir: a.Dir, Env: a.Env, Policy: s.fk.policy(timeout, a.Env)})
	var stdin []byte
	if a.Stdin {
		for {
			b, ok := r.readInput()
			if !ok {
				break
			}
			stdin = append(stdin, b...)
		}
	}
	f, ok := find(&s.fk.Script.mu, s.fk.Script.commands, text)
	if !ok {
		msg := unscripted("command", text)
		s.fk.unscripted(msg)
		s.fk.rec.setErr(idx, "SBX_"+agent.CodeNotFound)
		return nil, werr(agent.CodeNotFound, "%s", msg)
	}
	s.fk.rec.markScripted(idx)
	start := time.Now()
	pid := s.pid()
	r.event(agent.Event{Kind: "started", PID: pid})
	rep := f(r.ctx, Exec{Text: text, Args: a.Args, Dir: dir, Env: a.Env, Stdin: stdin, Workspace: &Workspace{s.fs}})
	out := agent.ExecReply{PID: pid, ExitCode: rep.ExitCode}
	stdout, tail, dropped := capOutput(rep.Stdout, a.MaxOutput)
	out.StdoutTail, out.StdoutDropped = tail, dropped
	stderr, etail, edropped := capOutput(rep.Stderr, a.MaxOutput)
	out.StderrTail, out.StderrDropped = etail, edropped
	r.sendData(agent.FrameStdout, stdout)
	r.sendData(agent.FrameStderr, stderr)
	if rep.Hang {
		var deadline <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-deadline:
			out.TimedOut = true
		case <-r.ctx.Done():
			out.Canceled = true
		}
		// A process that obeys the agent's SIGTERM.
		out.ExitCode, out.Signal = 128+15, "SIGTERM"
	}
	out.DurationNs = time.Since(start).Nanoseconds()
	return out, nil
}

// capOutput splits output the way the agent's capture does: the head is
// streamed, the tail returned in the reply, the middle dropped.
func capOutput(s string, max int) (head, tail []byte, dropped int64) {
	b := []byte(s)
	if max <= 0 || len(b) <= max {
		return b, nil, 0
	}
	h := max / 2
	t := max - h
	return b[:h], b[len(b)-t:], int64(len(b) - h - t)
}
