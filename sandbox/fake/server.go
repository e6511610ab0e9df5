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

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
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
	hello wire.Hello

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
	onSignal func(wire.SignalRequest)
}

const chunkSize = 32 << 10

func newServer(conn io.ReadWriteCloser, fk *Fake, fs *memFS) *server {
	return &server{conn: conn, fk: fk, fs: fs, reqs: map[uint32]*request{}, nextPID: 100, jobs: newJobTable()}
}

func (s *server) send(id uint32, t wire.FrameType, payload []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.dead {
		return io.ErrClosedPipe
	}
	if err := wire.WriteFrame(s.conn, id, t, payload); err != nil {
		s.dead = true
		return err
	}
	return nil
}

func (s *server) reply(id uint32, v any) error {
	b, _ := json.Marshal(v)
	return s.send(id, wire.FrameReply, b)
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
	f, err := wire.ReadFrame(s.conn)
	if err != nil {
		return err
	}
	if f.Type != wire.FrameHello {
		return fmt.Errorf("%w: first frame is %s, want hello", wire.ErrProtocol, f.Type)
	}
	if err := json.Unmarshal(f.Payload, &s.hello); err != nil {
		return fmt.Errorf("%w: bad hello: %v", wire.ErrProtocol, err)
	}
	s.fk.mu.Lock()
	s.fk.env = s.hello.Env
	s.fk.mu.Unlock()
	s.fs.mu.Lock()
	s.fs.dir = s.hello.Workspace
	s.fs.fsize, s.fs.disk = s.hello.FileSizeBytes, s.hello.DiskBytes
	s.fs.mu.Unlock()
	rep := wire.HelloReply{Version: wire.Version, PID: 1, PID1: true, UID: 1000, Hostname: "fake"}
	if !s.fk.cfg.noPython {
		rep.Python = "/usr/bin/python3"
	}
	if !s.fk.cfg.noBash {
		rep.Bash = "/bin/bash"
	}
	res, _ := json.Marshal(rep)
	msg, _ := json.Marshal(wire.Reply{Result: res})
	if err := s.send(0, wire.FrameHelloOK, msg); err != nil {
		return err
	}
	for {
		f, err := wire.ReadFrame(s.conn)
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

func (s *server) dispatch(f wire.Frame) error {
	switch f.Type {
	case wire.FrameRequest:
		var req wire.Request
		if err := json.Unmarshal(f.Payload, &req); err != nil {
			return s.reply(f.ID, wire.Reply{Error: werr(wire.CodeInvalidArgument, "malformed request: %v", err)})
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &request{id: f.ID, s: s, ctx: ctx, cancel: cancel, credit: wire.Window, in: make(chan []byte, wire.Window/chunkSize+8)}
		r.cond = sync.NewCond(&r.cmu)
		s.mu.Lock()
		if _, dup := s.reqs[f.ID]; dup {
			s.mu.Unlock()
			cancel()
			return fmt.Errorf("%w: duplicate request id %d", wire.ErrProtocol, f.ID)
		}
		s.reqs[f.ID] = r
		s.handlers.Add(1)
		s.mu.Unlock()
		go s.handle(r, req)
	case wire.FrameStdin, wire.FrameStdinClose, wire.FrameCancel, wire.FrameSignal, wire.FrameAck:
		s.mu.Lock()
		r := s.reqs[f.ID]
		s.mu.Unlock()
		if r == nil {
			return nil
		}
		switch f.Type {
		case wire.FrameStdin:
			select {
			case r.in <- f.Payload:
			default:
				return fmt.Errorf("%w: request %d sent past its flow-control window", wire.ErrProtocol, f.ID)
			}
		case wire.FrameStdinClose:
			r.inOnce.Do(func() { close(r.in) })
		case wire.FrameCancel:
			r.cancel()
		case wire.FrameSignal:
			var sr wire.SignalRequest
			if err := json.Unmarshal(f.Payload, &sr); err != nil {
				return fmt.Errorf("%w: bad signal frame: %v", wire.ErrProtocol, err)
			}
			r.sigMu.Lock()
			h := r.onSignal
			r.sigMu.Unlock()
			if h != nil {
				h(sr)
			}
		case wire.FrameAck:
			if len(f.Payload) != 4 {
				return fmt.Errorf("%w: ack of %d bytes", wire.ErrProtocol, len(f.Payload))
			}
			r.cmu.Lock()
			r.credit += int(binary.BigEndian.Uint32(f.Payload))
			r.cond.Broadcast()
			r.cmu.Unlock()
		}
	default:
		return fmt.Errorf("%w: unexpected %s frame from client", wire.ErrProtocol, f.Type)
	}
	return nil
}

func (r *request) setSignalHandler(h func(wire.SignalRequest)) {
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
		_ = r.s.send(r.id, wire.FrameAck, a[:])
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
func (r *request) sendData(t wire.FrameType, b []byte) bool {
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
	if !r.sendData(wire.FrameStdout, p) {
		return 0, context.Canceled
	}
	return len(p), nil
}

func (r *request) event(e wire.Event) {
	b, _ := json.Marshal(e)
	_ = r.s.send(r.id, wire.FrameEvent, b)
}

func (s *server) handle(r *request, req wire.Request) {
	defer s.handlers.Done()
	stop := context.AfterFunc(r.ctx, func() {
		r.cmu.Lock()
		r.cond.Broadcast()
		r.cmu.Unlock()
	})
	defer stop()
	var result any
	var we *wire.WireError
	func() {
		defer func() {
			if p := recover(); p != nil {
				we = werr(wire.CodeInternal, "fake agent failed while handling %q: %v", req.Op, p)
			}
		}()
		result, we = s.call(r, req)
	}()
	var rep wire.Reply
	if we != nil {
		rep.Error = we
	} else if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			rep.Error = werr(wire.CodeInternal, "encoding reply: %v", err)
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

func decodeArgs[T any](req wire.Request) (T, *wire.WireError) {
	var v T
	if len(req.Args) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(req.Args, &v); err != nil {
		return v, werr(wire.CodeInvalidArgument, "bad arguments for %s: %v", req.Op, err)
	}
	return v, nil
}

func (s *server) call(r *request, req wire.Request) (any, *wire.WireError) {
	switch req.Op {
	case "ping":
		return struct{}{}, nil
	case "exec":
		a, e := decodeArgs[wire.ExecRequest](req)
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
	return nil, werr(wire.CodeInvalidArgument, "unknown operation %q", req.Op)
}

// fileOp serves a file request from the workspace and records it.
func (s *server) fileOp(r *request, req wire.Request) (any, *wire.WireError) {
	var res any
	var e *wire.WireError
	c := Call{Kind: KindFile, Op: req.Op, Scripted: true, Policy: s.fk.policy(0, nil)}
	switch req.Op {
	case "fs.read":
		a, de := decodeArgs[wire.FSReadRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.read(a)
	case "fs.write":
		a, de := decodeArgs[wire.FSWriteRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.write(a)
	case "fs.edit":
		a, de := decodeArgs[wire.FSEditRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.edit(a)
	case "fs.stat", "fs.mkdir", "fs.remove", "fs.copyin", "fs.copyout":
		a, de := decodeArgs[wire.FSPathRequest](req)
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
		a, de := decodeArgs[wire.FSListRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.list(a)
	case "fs.move", "fs.copy":
		a, de := decodeArgs[wire.FSMoveRequest](req)
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
		a, de := decodeArgs[wire.FSChmodRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Path
		res, e = s.fs.chmod(a)
	case "fs.search":
		a, de := decodeArgs[wire.FSSearchRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Pattern
		c.Args = []string{a.Pattern, a.Path}
		res, e = s.fs.search(r.ctx, a)
	case "fs.glob":
		a, de := decodeArgs[wire.FSGlobRequest](req)
		if de != nil {
			return nil, de
		}
		c.Text = a.Pattern
		c.Args = []string{a.Pattern, a.Path}
		res, e = s.fs.glob(a)
	default:
		return nil, werr(wire.CodeInvalidArgument, "unknown operation %q", req.Op)
	}
	if e != nil {
		c.Err = string(e.Code)
	}
	s.fk.rec.add(c)
	return res, e
}

// resolveDir checks a command's working directory as the agent does.
func (s *server) resolveDir(dir string) (string, *wire.WireError) {
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
		return "", werr(wire.CodeNotDir, "working directory %q is not a directory", dir)
	}
	return rel, nil
}

func isKernel(a wire.ExecRequest) bool {
	return a.Stdin && !a.Pty && len(a.Args) == 4 && a.Args[1] == "-u" && a.Args[2] == "-c" && strings.Contains(a.Args[3], "<sandboxkit-driver>")
}

func isShell(a wire.ExecRequest) bool {
	return a.Pty && len(a.Args) >= 2 && strings.Join(a.Args[1:], " ") == "--norc --noprofile --noediting -i"
}

func (s *server) exec(r *request, a wire.ExecRequest) (any, *wire.WireError) {
	if len(a.Args) == 0 || a.Args[0] == "" {
		return nil, werr(wire.CodeInvalidArgument, "exec needs a program to run (args is empty)")
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

func (s *server) runCommand(r *request, a wire.ExecRequest, dir string) (any, *wire.WireError) {
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
		s.fk.rec.setErr(idx, string(wire.CodeNotFound))
		return nil, werr(wire.CodeNotFound, "%s", msg)
	}
	s.fk.rec.markScripted(idx)
	start := time.Now()
	pid := s.pid()
	r.event(wire.Event{Kind: "started", PID: pid})
	rep := f(r.ctx, Exec{Text: text, Args: a.Args, Dir: dir, Env: a.Env, Stdin: stdin, Workspace: &Workspace{s.fs}})
	out := wire.ExecReply{PID: pid, ExitCode: rep.ExitCode}
	stdout, tail, dropped := capOutput(rep.Stdout, a.MaxOutput)
	out.StdoutTail, out.StdoutDropped = tail, dropped
	stderr, etail, edropped := capOutput(rep.Stderr, a.MaxOutput)
	out.StderrTail, out.StderrDropped = etail, edropped
	r.sendData(wire.FrameStdout, stdout)
	r.sendData(wire.FrameStderr, stderr)
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
