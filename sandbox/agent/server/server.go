package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// ServeOptions tunes Serve.
type ServeOptions struct {
	// Logf receives the agent's own diagnostics (never user output). Nil
	// discards them.
	Logf func(format string, args ...any)
	// ProcessesReady, when set, holds back every process start until it
	// is closed. A backend whose agent must prepare before its sandbox
	// may fork (such as warming the threads a fork bomb would otherwise
	// starve it of) does so in parallel with the handshake and the
	// requests that start no process.
	ProcessesReady <-chan struct{}
	// WorkspaceDir, when set, is the directory opened as the workspace
	// that requests and processes name Hello.Workspace: the fake sandbox
	// serves a temporary directory as /workspace. Empty: Hello.Workspace
	// is the directory.
	WorkspaceDir string
	// Observe, when set, is told of each request as it arrives (its
	// operation and raw arguments) and, through the function it returns
	// (nil: not interested), of how it ended: its error, nil on success.
	// The fake sandbox records a test's calls with it. It runs on the
	// request loop and must not block.
	Observe func(op string, args json.RawMessage) (end func(*wire.WireError))
	// Clock, when set, is the time command and job timeouts
	// (ExecRequest.TimeoutMs) run on; nil is the real one. The fake
	// sandbox's clock ends a hanging scripted command at its timeout
	// without the wait.
	Clock Clock
	// Runner starts and controls the agent's processes (commands, jobs,
	// the Python kernel, shells). Nil means the platform's default: the
	// Linux runner (package agent/linuxrunner) on Linux, runner.Plain
	// elsewhere.
	Runner runner.Runner
	// ScratchDir is a directory the agent may write, where ServeProcess
	// checks before serving that the kernel's opens confine as the file
	// API relies on (a symbolic link out must not be followed). Empty
	// means /tmp; a backend whose agent has no writable /tmp (the local
	// landlock tier: /tmp is the host's, read-only) names its private one,
	// or the check is skipped with a log line.
	ScratchDir string
}

// Clock is a source of timers (ServeOptions.Clock).
type Clock interface {
	// After returns a channel that receives once d has passed on the
	// clock, and a function that stops the timer (reporting whether it
	// had not fired yet).
	After(d time.Duration) (<-chan time.Time, func() bool)
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) After(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// timeoutOf returns a channel that receives when a's timeout passes (nil,
// never, without one) and the function that releases its timer.
func (s *server) timeoutOf(a wire.ExecRequest) (<-chan time.Time, func() bool) {
	if a.TimeoutMs <= 0 {
		return nil, func() bool { return false }
	}
	return s.clock.After(time.Duration(a.TimeoutMs) * time.Millisecond)
}

// Serve runs the agent protocol over conn until the stream closes or
// fails. Before returning it kills every process the agent started (and,
// as a subreaper or PID 1, every process those left behind). The first
// frame must be Hello.
func Serve(conn io.ReadWriteCloser, opts ServeOptions) error {
	s := &server{
		conn:           conn,
		logf:           opts.Logf,
		reqs:           map[uint32]*request{},
		jobs:           newJobTable(),
		qwake:          make(chan struct{}, 1),
		processesReady: opts.ProcessesReady,
		wsDir:          opts.WorkspaceDir,
		observe:        opts.Observe,
		clock:          opts.Clock,
		runner:         opts.Runner,
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.runner == nil {
		s.runner = defaultRunner()
	}
	s.fds = newFDBudget()
	defer conn.Close()
	return s.run()
}

type server struct {
	conn io.ReadWriteCloser
	logf func(string, ...any)
	wmu  sync.Mutex
	// werr is the write error that closed the stream (under wmu): the read
	// loop then reports it instead of its own "use of closed file".
	werr  error
	hello wire.Hello
	ws    *workspace
	// proxy carries the sandbox's egress connections (Hello.Proxy).
	proxy *proxy
	// runner starts and controls processes (ServeOptions.Runner).
	runner runner.Runner
	fds    *fdBudget // descriptors of running commands (fds.go)
	jobs   *jobTable
	// processesReady gates process starts (ServeOptions.ProcessesReady).
	processesReady <-chan struct{}
	// wsDir and observe are ServeOptions.WorkspaceDir and Observe.
	wsDir   string
	observe func(op string, args json.RawMessage) func(*wire.WireError)
	clock   Clock // ServeOptions.Clock, or the real one

	// The read loop never writes to conn itself: when a command floods
	// the stream, conn's buffer is full and a write would block, and a
	// read loop that stops reading lets the client's writes (stdin,
	// uploads) fill the other direction until both sides wait on each
	// other. Its frames (inline replies, protocol errors) go to queue,
	// which writeLoop drains.
	qmu   sync.Mutex
	queue [][]byte
	qwake chan struct{}

	mu       sync.Mutex
	reqs     map[uint32]*request
	handlers sync.WaitGroup
	dead     bool
}

// request is the agent-side state of one in-flight request.
type request struct {
	id     uint32
	s      *server
	ctx    context.Context
	cancel context.CancelFunc

	cmu    sync.Mutex
	cond   *sync.Cond
	credit int

	in       chan []byte // inbound data frames; the sender respects Window
	blob     []byte      // raw result bytes sent with the reply (FrameBlob)
	inOnce   sync.Once
	sigMu    sync.Mutex
	onSignal func(wire.SignalRequest)
	// after runs once the reply is sent (exec.go: closing the command's
	// output off the reply's path).
	after []func()
}

func (s *server) run() error {
	r := wire.NewFrameReader(s.conn)
	f, err := wire.ReadFrame(r)
	if err != nil {
		return fmt.Errorf("agent: reading hello: %w", err)
	}
	if f.Type != wire.FrameHello {
		return fmt.Errorf("%w: first frame is %s, want hello", wire.ErrProtocol, f.Type)
	}
	if err := s.handleHello(f.Payload); err != nil {
		return err
	}
	endRunner := s.runner.Begin()
	defer endRunner()
	stopWriter := make(chan struct{})
	go s.writeLoop(stopWriter)
	defer close(stopWriter)
	defer s.shutdown()
	for {
		f, err := s.readFrame(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if werr, closed := s.closedByWrite(); closed {
				return werr
			}
			return err
		}
		if err := s.dispatch(f); err != nil {
			return err
		}
	}
}

func (s *server) handleHello(p []byte) error {
	var h wire.Hello
	if err := json.Unmarshal(p, &h); err != nil {
		return fmt.Errorf("%w: bad hello: %v", wire.ErrProtocol, err)
	}
	if h.Version != wire.Version {
		msg, _ := json.Marshal(wire.Reply{Error: wire.Errorf(wire.CodeInvalidArgument, "agent speaks protocol version %d, client %d: use the same sandboxkit version on both sides", wire.Version, h.Version)})
		_ = s.send(0, wire.FrameHelloOK, msg)
		return fmt.Errorf("%w: version %d", wire.ErrProtocol, h.Version)
	}
	s.hello = h
	ws, err := openWorkspaceAt(h, s.wsDir)
	if err != nil {
		msg, _ := json.Marshal(wire.Reply{Error: wire.Errorf(wire.CodeNotFound, "agent cannot open workspace %q: %v", h.Workspace, err)})
		_ = s.send(0, wire.FrameHelloOK, msg)
		return err
	}
	s.ws = ws
	host, _ := os.Hostname()
	rep := wire.HelloReply{Version: wire.Version, PID: os.Getpid(), PID1: os.Getpid() == 1, UID: os.Getuid(), Hostname: host,
		Python: s.lookPath("python3", h.Env), Bash: s.lookPath("bash", h.Env)}
	if h.Proxy != "" {
		if s.proxy, err = s.listenProxy(h.Proxy); err != nil {
			msg, _ := json.Marshal(wire.Reply{Error: wire.Errorf(wire.CodeExec, "agent cannot listen for the egress proxy on %s: %v", h.Proxy, err)})
			_ = s.send(0, wire.FrameHelloOK, msg)
			return err
		}
		rep.Proxy = s.proxy.l.Addr().String()
		rep.ProxyHandoff = s.proxy.handoff
	}
	res, _ := json.Marshal(rep)
	msg, _ := json.Marshal(wire.Reply{Result: res})
	if err := s.send(0, wire.FrameHelloOK, msg); err != nil {
		return err
	}
	if s.proxy != nil {
		s.proxy.start()
	}
	return nil
}

// lookPath finds a program on the sandbox's PATH: by the runner's own
// lookup when it has one (runner.Looker), else in the agent's file system.
func (s *server) lookPath(name string, env []string) string {
	if l, ok := s.runner.(runner.Looker); ok {
		return l.LookPath(name, env)
	}
	return lookPathIn(name, env)
}

func lookPathIn(name string, env []string) string {
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	for _, dir := range splitList(path) {
		p := dir + "/" + name
		if isExecutable(p) {
			return p
		}
	}
	return ""
}

func splitList(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == ':' {
			if i > start {
				out = append(out, p[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func (s *server) dispatch(f wire.Frame) error {
	switch f.Type {
	case wire.FrameRequest:
		req, ok := wire.ParseRequestFast(f.Payload) // the client's shape (wire/fast.go)
		if !ok {
			if err := json.Unmarshal(f.Payload, &req); err != nil {
				s.replyError(f.ID, wire.Errorf(wire.CodeInvalidArgument, "malformed request: %v", err))
				return nil
			}
		}
		var end func(*wire.WireError)
		if s.observe != nil {
			end = s.observe(req.Op, req.Args)
		}
		if s.serveInline(f.ID, req, end) {
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &request{id: f.ID, s: s, ctx: ctx, cancel: cancel, credit: wire.Window, in: make(chan []byte, wire.Window/wire.ChunkSize+8)}
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
		go s.handle(r, req, end)
	case wire.FrameStdin, wire.FrameStdinClose, wire.FrameCancel, wire.FrameSignal, wire.FrameAck:
		s.mu.Lock()
		r := s.reqs[f.ID]
		s.mu.Unlock()
		if r == nil {
			return nil // the request already ended; late frames are harmless
		}
		switch f.Type {
		case wire.FrameStdin:
			select {
			case r.in <- f.Payload:
			default:
				return fmt.Errorf("%w: request %d sent past its flow-control window", wire.ErrProtocol, f.ID)
			}
		case wire.FrameStdinClose:
			r.closeInput()
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
			n, err := wire.ParseAck(f.Payload)
			if err != nil {
				return err
			}
			r.cmu.Lock()
			r.credit += n
			r.cond.Broadcast()
			r.cmu.Unlock()
		}
	case wire.FrameConnData, wire.FrameConnAck, wire.FrameConnEOF, wire.FrameConnClose:
		if s.proxy == nil {
			return fmt.Errorf("%w: %s frame without an egress proxy", wire.ErrProtocol, f.Type)
		}
		return s.proxy.tn.Deliver(f)
	default:
		return fmt.Errorf("%w: unexpected %s frame from client", wire.ErrProtocol, f.Type)
	}
	return nil
}

func (r *request) closeInput() { r.inOnce.Do(func() { close(r.in) }) }

func (r *request) setSignalHandler(h func(wire.SignalRequest)) {
	r.sigMu.Lock()
	r.onSignal = h
	r.sigMu.Unlock()
}

// readInput returns the next inbound chunk and returns its credit to the
// client; ok is false at end of input or when the request is cancelled.
func (r *request) readInput() ([]byte, bool) {
	select {
	case b, ok := <-r.in:
		if !ok {
			return nil, false
		}
		_ = r.s.send(r.id, wire.FrameAck, wire.AckPayload(len(b)))
		return b, true
	case <-r.ctx.Done():
		return nil, false
	}
}

// sendData streams bytes to the client in chunks, waiting for credit. It
// gives up (returning false) when the request is cancelled or the stream
// is dead.
func (r *request) sendData(t wire.FrameType, b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), wire.ChunkSize)
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

func (r *request) event(e wire.Event) {
	b, _ := json.Marshal(e)
	_ = r.s.send(r.id, wire.FrameEvent, b)
}

func (s *server) handle(r *request, req wire.Request, end func(*wire.WireError)) {
	defer s.handlers.Done()
	// Wake senders blocked on credit when the request ends.
	stop := context.AfterFunc(r.ctx, func() {
		r.cmu.Lock()
		r.cond.Broadcast()
		r.cmu.Unlock()
	})
	defer stop()
	var result any
	var werr *wire.WireError
	func() {
		defer func() {
			if p := recover(); p != nil {
				s.logf("agent: panic in %s: %v\n%s", req.Op, p, debug.Stack())
				werr = wire.Errorf(wire.CodeInternal, "agent failed while handling %q: %v", req.Op, p)
			}
		}()
		result, werr = s.call(r, req)
	}()
	s.mu.Lock()
	delete(s.reqs, r.id)
	s.mu.Unlock()
	r.cancel()
	if end != nil {
		end(werr)
	}
	s.reply(r.id, result, werr, r.blob)
	for _, f := range r.after {
		f()
	}
}

// reply ends request id with its result or error (see encodeReply).
// It runs on a handler goroutine, so it may wait for the stream.
func (s *server) reply(id uint32, result any, werr *wire.WireError, blob []byte) {
	_ = s.write(encodeReply(id, result, werr, blob))
}

// encodeReply returns the frames that end request id: the Blob frame, when
// blob is set, and the Reply frame, in one buffer so that they go out in
// one write and the client receives them together (one wake-up, not two).
// A reply that cannot fit in a frame becomes a TOO_LARGE error: sending
// it would fail and leave the client waiting for an answer forever.
func encodeReply(id uint32, result any, werr *wire.WireError, blob []byte) []byte {
	var res []byte
	if werr == nil && result != nil {
		ok := false
		if fa, isFast := result.(wire.FastAppender); isFast {
			res, ok = fa.AppendJSONFast(nil) // wire/fast.go
		}
		if !ok {
			var err error
			if res, err = json.Marshal(result); err != nil {
				werr = wire.Errorf(wire.CodeInternal, "encoding reply: %v", err)
			}
		}
	}
	n := len("{}")
	if res != nil {
		n = len(wire.ReplyPrefix) + len(res) + 1
	}
	if werr == nil && max(len(blob), n) > wire.MaxPayload {
		werr = wire.Errorf(wire.CodeTooLarge, "the reply is %d bytes, over the protocol's %d byte frame limit: ask for less (a smaller max_bytes or max_output, a range of lines, a narrower search)", max(len(blob), n), wire.MaxPayload)
	}
	if werr != nil {
		b, _ := json.Marshal(wire.Reply{Error: werr})
		return wire.AppendFrame(nil, id, wire.FrameReply, b)
	}
	size := wire.HeaderSize + n
	if blob != nil {
		size += wire.HeaderSize + len(blob)
	}
	buf := make([]byte, 0, size)
	if blob != nil {
		buf = wire.AppendFrame(buf, id, wire.FrameBlob, blob)
	}
	buf = wire.AppendHeader(buf, id, wire.FrameReply, n)
	if res == nil {
		return append(buf, "{}"...)
	}
	// The Reply object is built around the result by hand: marshalling
	// Reply{Result: res} would scan (and copy) the result once more.
	return append(append(append(buf, wire.ReplyPrefix...), res...), '}')
}

// inlineReadMax is the largest file fs.read serves on the read loop.
const inlineReadMax = 64 << 10

// serveInline answers cheap requests that cannot block on the read loop
// itself. A new goroutine for them would usually be picked up by another
// thread, and on a busy machine waking that thread costs far more than
// the work. It reports whether it answered the request.
func (s *server) serveInline(id uint32, req wire.Request, end func(*wire.WireError)) (answered bool) {
	var result any
	var werr *wire.WireError
	var blob []byte
	defer func() {
		if p := recover(); p != nil {
			s.logf("agent: panic in %s: %v\n%s", req.Op, p, debug.Stack())
			result, werr, answered = nil, wire.Errorf(wire.CodeInternal, "agent failed while handling %q: %v", req.Op, p), true
		}
		if answered {
			if end != nil {
				end(werr)
			}
			s.answer(encodeReply(id, result, werr, blob))
		}
	}()
	o, ok := operations[req.Op]
	if !ok || o.inline == nil {
		return false
	}
	result, werr, blob, answered = o.inline(s, req)
	return answered
}

// replyError ends request id with an error. It runs on the read loop, so
// the frame is queued, never written here.
func (s *server) replyError(id uint32, e *wire.WireError) {
	b, _ := json.Marshal(wire.Reply{Error: e})
	s.enqueue(wire.AppendFrame(nil, id, wire.FrameReply, b))
}

// tryWriter is a stream that can write without waiting for room (the
// local backend's, sandbox/local/stream.go).
type tryWriter interface {
	// TryWrite writes as much of p as the stream takes now: n < len(p)
	// with a nil error means it is full.
	TryWrite(p []byte) (n int, err error)
}

// answer sends the frames of a request the read loop answered itself:
// written at once when no other write is under way and the stream takes
// them without waiting, else handed to writeLoop; either way the read
// loop never waits for the stream (see server.queue).
//
// Why not always writeLoop: the reply then went out only after the read
// loop had gone back to the stream (a read that finds it empty), parked,
// and the scheduler had switched to writeLoop: a goroutine hand-off and
// a system call on every small reply's path. Measured per 1 KB
// Files.ReadFile (BenchmarkRead1KBCost's loop, builds alternated, host
// and agent placed on one CPU with taskset so that the load of others
// moves them least, load 2.6-3.5): the agent's CPU time 16.9-21.5 µs
// (median 18.0) -> 16.3-18.1 µs (median 17.0).
func (s *server) answer(frames []byte) {
	tw, ok := s.conn.(tryWriter)
	if !ok || !s.wmu.TryLock() {
		s.enqueue(frames)
		return
	}
	if s.dead {
		s.wmu.Unlock()
		return // as write: the stream is gone
	}
	n, err := tw.TryWrite(frames)
	switch {
	case err != nil:
		s.writeFailed(err)
		s.wmu.Unlock()
	case n == len(frames):
		s.wmu.Unlock()
	case n == 0:
		s.wmu.Unlock()
		s.enqueue(frames)
	default:
		// The stream took part of a frame: nothing else may be written
		// before the rest, so wmu stays locked until a goroutine of its
		// own, which may wait for room, has written the rest. (Not
		// writeLoop: it may itself be waiting for wmu.) A stream this full
		// is rare; a goroutine then costs nothing that matters.
		rest := frames[n:]
		go func() {
			defer s.wmu.Unlock()
			if _, err := s.conn.Write(rest); err != nil {
				s.writeFailed(err)
			}
		}()
	}
}

// enqueue hands encoded frames to writeLoop. It never blocks on the
// stream (see server.queue).
func (s *server) enqueue(frames []byte) {
	s.qmu.Lock()
	s.queue = append(s.queue, frames)
	s.qmu.Unlock()
	select {
	case s.qwake <- struct{}{}:
	default:
	}
}

// writeLoop writes the read loop's queued frames, all that have gathered
// in one write, until stop is closed.
func (s *server) writeLoop(stop <-chan struct{}) {
	for {
		select {
		case <-s.qwake:
		case <-stop:
			return
		}
		s.qmu.Lock()
		q := s.queue
		s.queue = nil
		s.qmu.Unlock()
		if len(q) == 0 {
			continue // drained on an earlier wake-up
		}
		buf := q[0]
		for _, b := range q[1:] {
			buf = append(buf, b...)
		}
		_ = s.write(buf)
	}
}

// send writes one frame; frames from different goroutines never interleave.
func (s *server) send(id uint32, t wire.FrameType, payload []byte) error {
	if len(payload) > wire.MaxPayload {
		// Callers send only small frames and bounded chunks; reaching this
		// is a bug, and a frame the client would refuse kills the stream.
		s.fail()
		return fmt.Errorf("%w: frame of %d bytes exceeds the %d byte limit", wire.ErrProtocol, len(payload), wire.MaxPayload)
	}
	return s.write(wire.AppendFrame(make([]byte, 0, wire.HeaderSize+len(payload)), id, t, payload))
}

// write writes encoded frames with one Write. A failed write leaves the
// stream in an unknown state (maybe half a frame), so it closes the
// stream: the client then sees the agent gone (ErrDead) instead of
// waiting for replies that can no longer come.
func (s *server) write(buf []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.dead {
		return io.ErrClosedPipe
	}
	if _, err := s.conn.Write(buf); err != nil {
		s.writeFailed(err)
		return err
	}
	return nil
}

// writeFailed closes the stream after a failed write (wmu held).
func (s *server) writeFailed(err error) {
	s.dead = true
	s.werr = err
	s.conn.Close()
}

// closedByWrite reports whether the stream was closed because a write
// failed, and the error Serve should return for it. The read loop's own
// error is then only the close ("use of closed file"), which the local
// backend's agent printed on the user's stderr after every Close that
// raced a reply (seen in the Python benchmarks). A client that went away
// (EPIPE, ECONNRESET) ends the agent's job like an EOF: no error.
func (s *server) closedByWrite() (error, bool) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.werr == nil {
		return nil, false
	}
	if errors.Is(s.werr, syscall.EPIPE) || errors.Is(s.werr, syscall.ECONNRESET) {
		return nil, true
	}
	return fmt.Errorf("agent: writing to the stream: %w", s.werr), true
}

// fail closes the stream after a protocol fault of the agent's own.
func (s *server) fail() {
	s.wmu.Lock()
	s.dead = true
	s.wmu.Unlock()
	s.conn.Close()
}

func decodeArgs[T any](req wire.Request) (T, *wire.WireError) {
	var v T
	if len(req.Args) == 0 {
		return v, nil
	}
	if fu, ok := any(&v).(wire.FastUnmarshaler); ok && fu.UnmarshalFast(req.Args) {
		return v, nil // wire/fast.go
	}
	if err := json.Unmarshal(req.Args, &v); err != nil {
		return v, wire.Errorf(wire.CodeInvalidArgument, "bad arguments for %s: %v", req.Op, err)
	}
	return v, nil
}

// call serves req from the table of operations (ops.go).
func (s *server) call(r *request, req wire.Request) (any, *wire.WireError) {
	if o, ok := operations[req.Op]; ok {
		return o.run(s, r, req)
	}
	return nil, wire.Errorf(wire.CodeInvalidArgument, "unknown operation %q", req.Op)
}

// shutdownWait bounds how long shutdown waits for request handlers once
// every process is dead. A handler stuck in a call no kill can end (an
// open of a FIFO nobody will ever open again) must not keep Serve, and so
// the sandbox, alive.
const shutdownWait = 2 * time.Second

// shutdown ends every request and kills every process the agent started.
// It kills first and waits after: handlers often wait on those processes.
func (s *server) shutdown() {
	s.wmu.Lock()
	s.dead = true
	s.wmu.Unlock()
	s.mu.Lock()
	for _, r := range s.reqs {
		r.cancel()
	}
	s.mu.Unlock()
	if s.proxy != nil {
		s.proxy.close()
	}
	s.jobs.killAll()
	s.runner.KillAll()
	done := make(chan struct{})
	go func() { s.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownWait):
		s.logf("agent: request handlers still running %v after shutdown; leaving them", shutdownWait)
	}
	// Processes a handler started while we waited are the runner's end
	// (run's deferred endRunner, after this).
	if s.ws != nil {
		s.ws.close()
	}
}

var _ = exec.ErrNotFound
