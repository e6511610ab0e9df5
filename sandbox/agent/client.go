// Package agent is the host side of sandboxkit's in-sandbox agent: the
// client that speaks the agent protocol (package agent/wire) over one byte
// stream to the agent inside a sandbox's isolation boundary (package
// agent/server). Package sandbox and the backends use it; it is portable Go.
//
// The agent is the one process that runs INSIDE a sandbox's isolation
// boundary. It serves exec, signals, stdio, pty, file and search requests from
// the host over ONE multiplexed byte stream (a socketpair for the local
// backend, a container's attach stream for Docker). Every later command is
// started by this resident agent, which is both faster than a fresh
// isolation setup per command and the only way to reach a running sandbox's
// namespaces from Go (docs/isolation.md, pitfall 9).
//
// Threat model: everything on the agent's side of the stream is untrusted
// once user code runs. The Client therefore bounds what it accepts (frame
// size, buffered bytes per request, tunnelled connections) and treats a
// malformed frame or a closed stream as the agent's death (ErrDead), never
// as a reason to hang.
package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/internal/tunnel"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// ErrDead is returned by every pending and later call once the agent's
// stream has closed or failed: the agent (or its sandbox) is gone.
var ErrDead = errors.New("sandbox agent is gone")

// ErrClosed is ErrDead when the client itself closed the stream (Close):
// calls it cut were ended on purpose, not by a death. errors.Is(ErrClosed,
// ErrDead) holds.
var ErrClosed = fmt.Errorf("%w: the client closed the stream", ErrDead)

// ErrStalled is returned by a write with no deadline of its own (input to
// a process, credit, a tunnel's bytes) that waited stallWait for the
// stream while an earlier request, whose caller gave up, was still being
// written to an agent that reads nothing (stopped, frozen or hostile).
// Nothing of the write was sent; the stream is intact.
var ErrStalled = errors.New("the sandbox's agent has not read its stream for a while (it is stopped, frozen or hung)")

// stallWait is how long a write with no deadline waits for a stalled
// stream (ErrStalled): the same grace a cancelled call gives the agent.
const stallWait = cancelGrace

// Client speaks the agent protocol from the host side. It is safe for
// concurrent use; each call gets its own request id on the shared stream.
type Client struct {
	conn  io.ReadWriteCloser
	hello wire.HelloReply

	// wsem is the stream's write lock (capacity 1): a channel, not a
	// mutex, so that a caller waiting behind a write blocked on an agent
	// that reads nothing gives up at its own deadline (lockWrite).
	wsem chan struct{}
	// wdl interrupts a blocked Write (nil: the stream has no write
	// deadline, and writes with a deadline go on a goroutine; writeCtx).
	wdl interface{ SetWriteDeadline(time.Time) error }
	// stalled counts requests whose callers gave up and that are still
	// being written in the background (writeCtx); meanwhile writes with
	// no deadline wait for the lock at most stallWait.
	stalled atomic.Int32

	// Credit returned to the agent gathers in acks and ackLoop sends it.
	// The reader never writes: a write can block while the agent, its own
	// output blocked behind the frames the reader has not read yet, stops
	// reading, and then neither side moves again.
	amu   sync.Mutex
	acks  map[uint32]int
	awake chan struct{}

	mu      sync.Mutex
	next    uint32
	calls   map[uint32]*Call
	dead    chan struct{}
	deadErr error
	closing bool // Close was called: the stream's end is ErrClosed
	readers sync.WaitGroup

	// The reader role (see readLoop): one goroutine at a time reads the
	// stream through fr, either the background reader or a caller of Do
	// waiting for its own reply (a direct call). Under mu.
	fr       *wire.FrameReader
	reading  bool      // the role is held
	holder   *Call     // the direct call holding it; nil: the background reader
	waiting  []*Call   // direct calls waiting for the role (or their reply)
	async    int       // calls in flight whose reply only the background reader reads
	released time.Time // when a direct call last left the role free
	bgWake   chan struct{}
	// bgUntimed: the background reader waits with no timer (the role was
	// held when it last looked), so whoever frees the role must wake it.
	bgUntimed bool
	// bgWakes counts the background reader's wake-ups (tests).
	bgWakes int
	// direct: Do may read its own reply (no tunnel shares the stream);
	// deadliner interrupts a direct call's blocked read (nil: the stream
	// cannot be, and only calls that cannot be cancelled read directly).
	direct    bool
	deadliner interface{ SetReadDeadline(time.Time) error }
	// hangup, when the stream offers it (Hangup), is closed once the
	// agent's end hangs up: the background reader then need not read an
	// idle stream to see the agent die, and keeps off the role (no
	// linger). hungUp: it was closed (under mu).
	hangup <-chan struct{}
	hungUp bool

	// tunnel holds the connections the agent's egress proxy carries
	// (Hello.Proxy); see Egress.
	tunnel *tunnel.Tunnel
}

// Handlers receive a streaming call's interim frames. They run on the
// goroutine that holds the client's reader role (one at a time, in the
// stream's order) and must not block.
type Handlers struct {
	// OnData receives stdout/stderr (or download) bytes. Unless ManualAck
	// is set, credit is returned to the agent as soon as it returns.
	OnData func(t wire.FrameType, b []byte)
	// OnEvent receives interim events (e.g. the process started).
	OnEvent func(wire.Event)
	// ManualAck leaves returning credit to the caller (Call.Ack), for
	// consumers that pull data at their own pace.
	ManualAck bool
}

// Call is one in-flight request.
type Call struct {
	c      *Client
	id     uint32
	h      Handlers
	done   chan struct{}
	reply  wire.Reply
	err    error
	cmu    sync.Mutex
	cond   *sync.Cond
	credit int
	closed bool
	blob   []byte // a FrameBlob's payload, read before the reply
	// Reader role state (under c.mu): async: only the background reader
	// reads this call's reply; role: the role is handed to this waiting
	// direct call; abandoned: its cancelled wait gave up the role.
	async     bool
	role      chan struct{}
	abandoned bool
}

// Dial performs the handshake over conn and starts the client's reader.
// ctx bounds the handshake only.
func Dial(ctx context.Context, conn io.ReadWriteCloser, h wire.Hello) (*Client, error) {
	h.Version = wire.Version
	// The agent may hand proxy connections' sockets over where the
	// stream carries descriptors (package agent/internal/tunnel).
	h.ProxyHandoff = h.Proxy != "" && tunnel.CanHandOff(conn)
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	type result struct {
		rep wire.HelloReply
		err error
	}
	ch := make(chan result, 1)
	go func() {
		if err := wire.WriteFrame(conn, 0, wire.FrameHello, b); err != nil {
			ch <- result{err: fmt.Errorf("%w: sending hello: %v", ErrDead, err)}
			return
		}
		f, err := wire.ReadFrame(conn)
		if err != nil {
			ch <- result{err: fmt.Errorf("%w: the agent did not answer the handshake: %v", ErrDead, err)}
			return
		}
		if f.Type != wire.FrameHelloOK {
			ch <- result{err: fmt.Errorf("%w: handshake answered with %s", wire.ErrProtocol, f.Type)}
			return
		}
		var rep wire.Reply
		if err := json.Unmarshal(f.Payload, &rep); err != nil {
			ch <- result{err: fmt.Errorf("%w: bad handshake reply: %v", wire.ErrProtocol, err)}
			return
		}
		if rep.Error != nil {
			ch <- result{err: rep.Error}
			return
		}
		var hr wire.HelloReply
		if err := json.Unmarshal(rep.Result, &hr); err != nil {
			ch <- result{err: fmt.Errorf("%w: bad handshake reply: %v", wire.ErrProtocol, err)}
			return
		}
		ch <- result{rep: hr}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			conn.Close()
			return nil, r.err
		}
		c := &Client{conn: conn, hello: r.rep, calls: map[uint32]*Call{}, dead: make(chan struct{}),
			acks: map[uint32]int{}, awake: make(chan struct{}, 1), bgWake: make(chan struct{}, 1),
			wsem: make(chan struct{}, 1)}
		if wdl, ok := conn.(interface{ SetWriteDeadline(time.Time) error }); ok && wdl.SetWriteDeadline(time.Time{}) == nil {
			c.wdl = wdl // (a connection without deadlines says so by an error)
		}
		c.tunnel = tunnel.New(c.send, c.write, tunnel.Addr("egress proxy "+r.rep.Proxy))
		var src io.Reader = conn
		if r.rep.ProxyHandoff {
			src = c.tunnel.HandoffReader(conn) // keeps the handed-over sockets
		}
		c.fr = wire.NewResumableFrameReader(src)
		// Tunnelled connections' frames come at any time and must be
		// read at once: with an egress proxy the background reader reads
		// everything.
		c.direct = r.rep.Proxy == ""
		c.deadliner, _ = conn.(interface{ SetReadDeadline(time.Time) error })
		if h, ok := conn.(Hanger); ok && c.direct {
			c.hangup = h.Hangup()
		}
		if r.rep.Proxy != "" {
			c.tunnel.UseStream(conn, c.writeWith, tunnel.Splicing{Send: true})
			// Handed-over sockets must be the proxy's accepted ones.
			if err := c.tunnel.ExpectHandoffsFrom(r.rep.Proxy); err != nil {
				conn.Close()
				return nil, fmt.Errorf("%w: the agent's egress proxy address %q: %v", ErrDead, r.rep.Proxy, err)
			}
		}
		c.readers.Add(2)
		go c.readLoop()
		go c.ackLoop()
		return c, nil
	case <-ctx.Done():
		conn.Close()
		<-ch
		return nil, fmt.Errorf("%w: handshake: %v", ErrDead, ctx.Err())
	}
}

// lockWrite takes the stream's write lock, or gives up when ctx ends
// (its error) or the stream is gone.
func (c *Client) lockWrite(ctx context.Context) error {
	select {
	case c.wsem <- struct{}{}:
		return nil
	default:
	}
	if ctx.Done() == nil && c.stalled.Load() > 0 {
		t := time.NewTimer(stallWait)
		defer t.Stop()
		select {
		case c.wsem <- struct{}{}:
			return nil
		case <-t.C:
			return ErrStalled
		case <-c.dead:
			return c.Err()
		}
	}
	select {
	case c.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.dead:
		return c.Err()
	}
}

func (c *Client) unlockWrite() { <-c.wsem }

// write writes encoded frames with one Write (the tunnel's ConnData).
func (c *Client) write(frames []byte) error {
	return c.writeCtx(context.Background(), frames, 0)
}

// writeCtx writes encoded frames with one Write, giving up when ctx ends.
// Why: an agent that reads nothing (stopped, frozen, or hostile) leaves a
// write bigger than the stream's buffers (an 8 MB Files.Write) blocked
// for good, and, under the write lock, every later call behind it: the
// callers' deadlines passed unnoticed and the whole sandbox hung until
// Close (TestCallsKeepTheirDeadlinesWhileTheAgentStopsReading).
//
// The write runs on the caller's goroutine, interrupted at ctx's end by
// a write deadline where the stream has one (the local socketpair,
// Docker's connection). If nothing was sent the caller gets ctx's error
// (the request never reached the agent). If part of the frames went out,
// the stream cannot be left with half a frame: a goroutine keeps the
// lock and sends the rest, then the Cancel of request cancelID (0: none),
// and the caller gets ctx's error at once. A stream without a write
// deadline (Kubernetes') writes on a goroutine whenever ctx can end.
func (c *Client) writeCtx(ctx context.Context, frames []byte, cancelID uint32) error {
	if err := c.lockWrite(ctx); err != nil {
		return err
	}
	if err := c.Err(); err != nil {
		c.unlockWrite()
		return err
	}
	if ctx.Done() == nil {
		defer c.unlockWrite()
		if _, err := c.conn.Write(frames); err != nil {
			return fmt.Errorf("%w: %v", ErrDead, err)
		}
		return nil
	}
	if c.wdl == nil {
		// Whether the caller gave up and whether the request went out
		// whole are decided under one lock: the Cancel follows exactly
		// when the caller was told the request failed (review R5 of
		// session 8: deciding each on its own, a request could go out
		// whole, uncancelled, to a caller told it failed).
		var (
			mu            sync.Mutex
			gaveUp, wrote bool
		)
		done := make(chan error, 1)
		go func() {
			_, err := c.conn.Write(frames)
			mu.Lock()
			wrote = true
			g := gaveUp
			mu.Unlock()
			if g {
				if err == nil && cancelID != 0 {
					_, err = c.conn.Write(wire.AppendFrame(nil, cancelID, wire.FrameCancel, nil))
				}
				c.stalled.Add(-1)
			}
			c.unlockWrite()
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%w: %v", ErrDead, err)
			}
			return nil
		case <-ctx.Done():
			mu.Lock()
			if wrote { // out whole: the call stands, the caller's wait cancels it
				mu.Unlock()
				if err := <-done; err != nil {
					return fmt.Errorf("%w: %v", ErrDead, err)
				}
				return nil
			}
			gaveUp = true
			c.stalled.Add(1) // until the goroutine ends
			mu.Unlock()
			return ctx.Err()
		}
	}
	var (
		mu              sync.Mutex
		fired, finished bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			fired = true
			_ = c.wdl.SetWriteDeadline(time.Unix(1, 0))
		}
	})
	n, err := c.conn.Write(frames)
	stop()
	mu.Lock()
	finished = true
	interrupted := fired
	mu.Unlock()
	if interrupted {
		_ = c.wdl.SetWriteDeadline(time.Time{})
	}
	switch {
	case err == nil:
		c.unlockWrite()
		return nil
	case !interrupted || !errors.Is(err, os.ErrDeadlineExceeded):
		c.unlockWrite()
		return fmt.Errorf("%w: %v", ErrDead, err)
	case n == 0:
		c.unlockWrite()
		return ctx.Err()
	}
	rest := frames[n:len(frames):len(frames)]
	if cancelID != 0 {
		rest = wire.AppendFrame(rest, cancelID, wire.FrameCancel, nil)
	}
	c.stalled.Add(1)
	go func() {
		defer c.unlockWrite()
		defer c.stalled.Add(-1)
		if _, err := c.conn.Write(rest); err != nil {
			c.conn.Close() // half a frame: the stream is unusable
		}
	}()
	return ctx.Err()
}

// writeWith runs fn with the stream's write lock held: the tunnel writes
// a spliced ConnData frame in parts. A failure may leave half a frame, so
// it ends the stream.
func (c *Client) writeWith(fn func(io.Writer) error) error {
	if err := c.lockWrite(context.Background()); err != nil {
		return err
	}
	defer c.unlockWrite()
	if err := c.Err(); err != nil {
		return err
	}
	if err := fn(c.conn); err != nil {
		c.conn.Close()
		return fmt.Errorf("%w: %v", ErrDead, err)
	}
	return nil
}

// Hello returns what the agent reported at the handshake.
func (c *Client) Hello() wire.HelloReply { return c.hello }

// Egress returns the connections programs in the sandbox make to the
// agent's egress proxy (Hello.Proxy), as a listener: each accepted
// net.Conn carries one connection's bytes, whose first bytes are the
// program's HTTP proxy request. The caller decides what to do with them.
// Accept fails with net.ErrClosed once the stream is gone. Call it once.
func (c *Client) Egress() net.Listener {
	return tunnel.NewListener(c.tunnel)
}

// ServeEgressHandoff takes the egress proxy's connections the agent hands
// over on l, a unix socket its backend gave it (Hello.ProxyHandoffPath),
// into the Egress listener, until l closes or the stream ends.
func (c *Client) ServeEgressHandoff(l net.Listener) {
	c.tunnel.ServeHandoff(l)
}

// Done is closed when the stream to the agent is gone.
func (c *Client) Done() <-chan struct{} { return c.dead }

// Err returns why the stream ended, or nil while it is alive.
func (c *Client) Err() error {
	select {
	case <-c.dead:
		return c.deadErr
	default:
		return nil
	}
}

// Close closes the stream (the agent then kills everything it started and
// exits) and waits for the reader to finish.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.wakeReader() // a lingering background reader reads the end
	err := c.conn.Close()
	c.readers.Wait()
	return err
}

// linger is how long the background reader leaves the stream unread
// after a direct call gave the reader role up, so that the next call of a
// burst finds the role free. It bounds how late the client sees, with no
// call in flight, that the agent died. A stream that tells of its peer's
// hang-up (Hanger) needs no linger.
const linger = 10 * time.Millisecond

// Hanger is a stream that tells when its peer hangs up, without being
// read (the local backend's socket). Over it an idle client learns of the
// agent's death from Hangup, so the background reader does not take the
// reader role back after linger, and a call that comes after a pause —
// every call of a model comes after its turn — reads its own reply as a
// call in a burst does, instead of waiting for the background reader to
// read it and hand it over: a wake-up of the reader's goroutine, then of
// the caller's, and of another thread of the runtime to run it. Measured
// per 1 KB Files.ReadFile after 50 ms idle (40 calls, 3 runs each, old
// and new builds alternated, load 0.9-1.9): the host's CPU time 196-227
// -> 163-176 µs; the wall time (BenchmarkAfterIdleRead1KB, 257-306 ->
// 278-311 µs, load 1-3.4) does not move beyond the noise: a call after a
// pause is spent mostly in the agent running cold (130-150 µs of CPU
// against 17 back to back: cold caches and TLBs on a vCPU that halted).
type Hanger interface {
	// Hangup returns a channel closed once the peer has hung up (or the
	// stream was closed). Data arriving does not close it.
	Hangup() <-chan struct{}
}

// readLoop is the background reader. It holds the reader role whenever a
// frame may come that no direct call waits for: while calls it alone
// delivers are in flight (streaming calls, cancellable waits on a stream
// that cannot be interrupted), with an egress proxy, once Close was
// called, and after linger without a direct call, so that an idle client
// still sees the agent's death (Done) at once.
//
// Why a direct call reads its own reply: when the background reader read
// it, the reader's goroutine woke, then woke the caller's (a channel
// close), and the runtime, seeing an idle P, woke a second thread to run
// the caller (wakep), which spun, tried to steal it (a 3 µs nanosleep) and
// slept again (futex): per read two futex calls and a nanosleep more. A
// caller that reads its own reply is woken by the runtime's poller itself,
// once, as the agent is. Per 1 KB Files.ReadFile (BenchmarkRead1KBCost,
// 5,000 reads, old and new builds alternated 7 times, load 5-12): the
// host's context switches 2.6-3.0 -> 1.02-1.07, its CPU time 23-52 µs
// (median 31) -> 14-25 µs (median 22); the agent's unchanged. Wall time
// at chrt -f 50 (BenchmarkFloorRead1KB, load 4-10): 77-82 -> 72-75 µs,
// 2.9-3.3x -> 2.2-2.5x the pipe floor. What is left is mostly the Go
// runtime's own round trip on this 2-core VM: a Go program sending 60
// bytes to a Go child (GOMAXPROCS=1) over a socketpair and reading 1 KB
// back, each side blocking in the poller, costs 36-39 µs wall and 26-29
// µs CPU per side at chrt -f 50 (19-22 µs, 11-14 µs at normal priority);
// with the reply handed over by a reader goroutine as before, 40-42 µs
// (25-35 µs). The agent's file work and both sides' JSON come on top.
func (c *Client) readLoop() {
	defer c.readers.Done()
	t := time.NewTimer(linger)
	defer t.Stop()
	fired := false // the last wait ended by the timer
	for {
		c.mu.Lock()
		for c.reading || !c.readerNeeded(time.Now()) {
			// While a direct call has held the role for a whole linger
			// there is nothing to time: passRole wakes this loop when it
			// leaves the role free (bgUntimed). A timer re-armed here
			// instead woke the reader every linger for as long as a long
			// direct call (Job.Wait, a big search) read: 293 wake-ups and
			// 31 ms of host CPU in a 3 s Job.Wait, against 0.6 ms before
			// (found in review; TestLongCallDoesNotWakeTheHost in package sandbox).
			//
			// But the reader goes untimed only once its timer fired with
			// the role held, not whenever it finds the role held: woken by
			// passRole, it found the role already taken by the next call
			// of a burst (its thread wakes slower than the caller makes
			// the next call), went untimed, and so the next passRole woke
			// it again — a wake-up of a second thread (futex, and the
			// runtime's wakep) on every call. Measured per 1 KB
			// Files.ReadFile (BenchmarkRead1KBCost): 0.5-0.7 of these per
			// read before; now two per linger (a timer's, and the next
			// passRole's) whatever the calls' rate.
			//
			// Over a stream that tells of its peer's hang-up there is no
			// linger to time: the reader waits for that, and for what
			// passRole's readerNeeded sees (an async call, Close).
			var hup <-chan struct{}
			var tc <-chan time.Time
			untimed := c.reading && fired
			switch {
			case c.hangup != nil:
				t.Stop()
				if !c.hungUp {
					hup = c.hangup
				}
				untimed = false // passRole wakes it only when it is needed
			case untimed:
				t.Stop()
			case c.reading:
				t.Reset(linger)
				tc = t.C
			default:
				t.Reset(linger - time.Since(c.released))
				tc = t.C
			}
			c.bgUntimed = untimed
			c.mu.Unlock()
			fired = false
			select {
			case <-c.bgWake:
			case <-tc:
				fired = true
			case <-hup:
			case <-c.dead:
				return
			}
			c.mu.Lock()
			if hup != nil {
				select {
				case <-hup:
					c.hungUp = true
				default:
				}
			}
			c.bgUntimed = false
			c.bgWakes++
		}
		if c.deadErr != nil {
			c.mu.Unlock()
			return
		}
		c.reading, c.holder = true, nil
		c.mu.Unlock()
		for {
			f, err := c.fr.Next()
			if err != nil {
				if c.interrupted(err) {
					continue
				}
				c.die(err)
				return
			}
			direct, err := c.deliver(f)
			if err != nil {
				c.die(err)
				return
			}
			c.mu.Lock()
			// Step back once direct calls are what the client makes.
			if c.direct && c.async == 0 && !c.closing && (direct || len(c.waiting) > 0) {
				c.passRole()
				c.mu.Unlock()
				break
			}
			c.mu.Unlock()
		}
	}
}

// readerNeeded reports whether the background reader must hold the free
// role now (c.mu held).
func (c *Client) readerNeeded(now time.Time) bool {
	if c.deadErr != nil || !c.direct || c.async > 0 || c.closing {
		return true
	}
	if c.hangup != nil {
		return c.hungUp
	}
	return now.Sub(c.released) >= linger
}

// wakeReader tells the background reader to look again at whether it is
// needed.
func (c *Client) wakeReader() {
	select {
	case c.bgWake <- struct{}{}:
	default:
	}
}

// passRole gives the reader role up (c.mu held): to the first direct call
// still waiting, else to nobody — the background reader takes it when it
// is needed.
func (c *Client) passRole() {
	c.reading, c.holder = false, nil
	for len(c.waiting) > 0 {
		w := c.waiting[0]
		c.waiting = c.waiting[1:]
		if _, inFlight := c.calls[w.id]; inFlight {
			c.reading, c.holder = true, w
			w.role <- struct{}{}
			return
		}
	}
	c.released = time.Now()
	if c.readerNeeded(c.released) || c.bgUntimed {
		c.wakeReader()
	}
}

// interrupted reports whether err is a deadline that interrupted a
// reader's blocked read (see waitDirect) rather than the stream's end.
// The deadline is cleared; the reader goes on reading unless its own
// call was abandoned.
func (c *Client) interrupted(err error) bool {
	if c.deadliner == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.mu.Lock()
	_ = c.deadliner.SetReadDeadline(time.Time{})
	c.mu.Unlock()
	return true
}

// die ends the client after the stream failed or closed with err: every
// call in flight and every later one gets ErrDead (or ErrClosed). The
// holder of the reader role calls it, so once.
func (c *Client) die(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
		err = ErrDead
	} else {
		err = fmt.Errorf("%w: %v", ErrDead, err)
	}
	c.conn.Close()
	c.tunnel.Shutdown()
	c.mu.Lock()
	if c.deadErr != nil {
		c.mu.Unlock()
		return
	}
	if c.closing {
		err = ErrClosed
	}
	c.deadErr = err
	close(c.dead)
	calls := c.calls
	c.calls = map[uint32]*Call{}
	c.async, c.waiting = 0, nil
	c.mu.Unlock()
	for _, call := range calls {
		call.finish(wire.Reply{}, err)
	}
}

// waitDirect waits for a direct call's reply, reading the stream itself
// whenever the reader role is free or handed to it. A cancelled ctx
// cancels the request and waits up to two seconds for the agent to end
// it (as WaitContext); a read blocked past that is interrupted by a
// deadline, the role goes on, and ctx's error is returned.
func (c *Client) waitDirect(ctx context.Context, call *Call) (json.RawMessage, error) {
	c.mu.Lock()
	if c.reading {
		call.role = make(chan struct{}, 1)
		c.waiting = append(c.waiting, call)
		c.mu.Unlock()
		select {
		case <-call.done:
			c.mu.Lock()
			c.leaveQueue(call)
			c.mu.Unlock()
			return call.Wait()
		case <-call.role:
		case <-ctx.Done():
			c.mu.Lock()
			c.leaveQueue(call)
			c.makeAsync(call)
			c.mu.Unlock()
			return call.WaitContext(ctx)
		}
	} else {
		c.reading, c.holder = true, call
		c.mu.Unlock()
	}
	// The role is ours until the reply is in.
	cancelled := func() bool { return false }
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			time.AfterFunc(cancelGrace, func() { c.interrupt(call) })
			call.Cancel()
		})
		cancelled = func() bool { return !stop() }
	}
	for !call.finished() {
		f, err := c.fr.Next()
		if err != nil {
			if c.interrupted(err) {
				c.mu.Lock()
				if call.abandoned {
					c.makeAsync(call)
					c.passRole()
					c.mu.Unlock()
					return nil, ctx.Err()
				}
				c.mu.Unlock()
				continue
			}
			c.die(err)
			break
		}
		if _, err := c.deliver(f); err != nil {
			c.die(err)
			break
		}
	}
	c.mu.Lock()
	if c.holder == call && c.reading {
		c.passRole()
	}
	c.mu.Unlock()
	if cancelled() {
		return nil, ctx.Err()
	}
	return call.Wait()
}

// leaveQueue takes call off the direct calls waiting for the role (c.mu
// held); if the role was handed to it meanwhile, it is passed on.
func (c *Client) leaveQueue(call *Call) {
	for i, w := range c.waiting {
		if w == call {
			c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
			break
		}
	}
	select {
	case <-call.role:
		if c.holder == call {
			c.passRole()
		}
	default:
	}
}

// makeAsync leaves call's reply to the background reader (c.mu held).
func (c *Client) makeAsync(call *Call) {
	if _, inFlight := c.calls[call.id]; inFlight && !call.async {
		call.async = true
		c.async++
		if !c.reading {
			c.wakeReader()
		}
	}
}

// interrupt ends call's read with a deadline if call still holds the role
// (its cancelled wait is over).
func (c *Client) interrupt(call *Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holder == call && c.reading && c.deadliner != nil {
		call.abandoned = true
		_ = c.deadliner.SetReadDeadline(time.Unix(1, 0))
	}
}

// deliver hands frame f to its call (or the tunnel). direct reports that
// it was the reply of a direct call.
func (c *Client) deliver(f wire.Frame) (direct bool, err error) {
	if f.Type >= wire.FrameConnOpen && f.Type <= wire.FrameConnHandoff {
		if c.hello.Proxy == "" {
			return false, fmt.Errorf("%w: %s frame without an egress proxy", wire.ErrProtocol, f.Type)
		}
		return false, c.tunnel.Deliver(f)
	}
	c.mu.Lock()
	call := c.calls[f.ID]
	if f.Type == wire.FrameReply && call != nil {
		delete(c.calls, f.ID)
		if call.async {
			c.async--
		}
	}
	c.mu.Unlock()
	if call == nil {
		return false, nil // a call we abandoned
	}
	return f.Type == wire.FrameReply && !call.async, c.deliverTo(call, f)
}

func (c *Client) deliverTo(call *Call, f wire.Frame) error {
	switch f.Type {
	case wire.FrameReply:
		rep, err := parseReply(f.Payload)
		if err != nil {
			call.finish(wire.Reply{}, fmt.Errorf("%w: bad reply: %v", wire.ErrProtocol, err))
			return nil
		}
		call.finish(rep, nil)
	case wire.FrameBlob:
		// Only the holder of the reader role touches blob before
		// finish, and readers of it wait for done.
		if call.blob != nil {
			return fmt.Errorf("%w: two blob frames for request %d", wire.ErrProtocol, f.ID)
		}
		call.blob = f.Payload
	case wire.FrameStdout, wire.FrameStderr:
		if call.h.OnData != nil {
			call.h.OnData(f.Type, f.Payload)
		}
		if !call.h.ManualAck {
			call.Ack(len(f.Payload))
		}
	case wire.FrameEvent:
		var ev wire.Event
		if err := json.Unmarshal(f.Payload, &ev); err == nil && call.h.OnEvent != nil {
			call.h.OnEvent(ev)
		}
	case wire.FrameAck:
		n, err := wire.ParseAck(f.Payload)
		if err != nil {
			return err
		}
		call.cmu.Lock()
		call.credit += n
		call.cond.Broadcast()
		call.cmu.Unlock()
	default:
		return fmt.Errorf("%w: unexpected %s frame from agent", wire.ErrProtocol, f.Type)
	}
	return nil
}

// parseReply decodes a Reply frame. The agent writes a successful reply as
// replyPrefix + result + "}"; that shape is cut out without scanning the
// result, which its consumer decodes (and so validates) anyway. Anything
// else goes through the JSON decoder.
func parseReply(p []byte) (wire.Reply, error) {
	if len(p) > len(wire.ReplyPrefix) && string(p[:len(wire.ReplyPrefix)]) == wire.ReplyPrefix && p[len(p)-1] == '}' {
		return wire.Reply{Result: json.RawMessage(p[len(wire.ReplyPrefix) : len(p)-1])}, nil
	}
	var rep wire.Reply
	err := json.Unmarshal(p, &rep)
	return rep, err
}

func (call *Call) finish(rep wire.Reply, err error) {
	call.cmu.Lock()
	if call.closed {
		call.cmu.Unlock()
		return
	}
	call.closed = true
	call.reply, call.err = rep, err
	call.cond.Broadcast()
	call.cmu.Unlock()
	close(call.done)
}

func (c *Client) send(id uint32, t wire.FrameType, payload []byte) error {
	return c.sendCtx(context.Background(), id, t, payload)
}

// sendCtx is send, giving up when ctx ends (writeCtx).
func (c *Client) sendCtx(ctx context.Context, id uint32, t wire.FrameType, payload []byte) error {
	if len(payload) > wire.MaxPayload {
		return fmt.Errorf("%w: frame of %d bytes exceeds the %d byte limit", wire.ErrProtocol, len(payload), wire.MaxPayload)
	}
	return c.writeCtx(ctx, wire.AppendFrame(make([]byte, 0, wire.HeaderSize+len(payload)), id, t, payload), 0)
}

// Start sends a request and returns at once; the reply arrives through
// Call.Wait.
func (c *Client) Start(op string, args any, h Handlers) (*Call, error) {
	return c.start(context.Background(), op, args, h, true)
}

// StartContext is Start, giving up when ctx ends before the request is
// written (an agent that reads nothing; see writeCtx). ctx bounds only the
// sending: the call itself lives on until its reply or Cancel.
func (c *Client) StartContext(ctx context.Context, op string, args any, h Handlers) (*Call, error) {
	return c.start(ctx, op, args, h, true)
}

// start sends a request; an async call's reply is read by the background
// reader, a direct one's by its caller (waitDirect).
//
// A request that ctx ends before it is written (an agent that reads
// nothing) fails with ctx's error; one ctx ends while it is written is
// finished in the background and followed by its Cancel (writeCtx).
func (c *Client) start(ctx context.Context, op string, args any, h Handlers, async bool) (*Call, error) {
	frame, err := encodeRequest(op, args)
	if err != nil {
		return nil, err
	}
	call := &Call{c: c, h: h, done: make(chan struct{}), credit: wire.Window, async: async}
	call.cond = sync.NewCond(&call.cmu)
	c.mu.Lock()
	if err := c.Err(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	if c.next == 0 {
		c.next = 1
	}
	call.id = c.next
	c.calls[call.id] = call
	if async {
		c.async++
		if c.async == 1 && !c.reading {
			c.wakeReader()
		}
	}
	c.mu.Unlock()
	binary.BigEndian.PutUint32(frame[4:8], call.id)
	if err := c.writeCtx(ctx, frame, call.id); err != nil {
		c.mu.Lock()
		if _, inFlight := c.calls[call.id]; inFlight {
			delete(c.calls, call.id)
			if async {
				c.async--
			}
		}
		c.mu.Unlock()
		return nil, err
	}
	return call, nil
}

// encodeRequest returns the Request frame of op with args (its id left 0
// for Start to fill in), encoded in one buffer: the JSON of wire.Request
// is built around the arguments' JSON by hand (marshalling Request would
// scan and copy the arguments once more), and the header goes in front.
func encodeRequest(op string, args any) ([]byte, error) {
	buf := make([]byte, wire.HeaderSize, 128)
	// The fast encoders (wire/fast.go) where they apply: encoding/json's
	// code runs cold in a call after a pause.
	var err error
	b, ok := wire.AppendRequestOp(buf, op)
	if !ok {
		if b, err = appendJSON(append(buf, `{"op":`...), op); err != nil {
			return nil, err
		}
	}
	buf = b
	if args != nil {
		buf = append(buf, `,"args":`...)
		ok := false
		if fa, isFast := args.(wire.FastAppender); isFast {
			buf, ok = fa.AppendJSONFast(buf)
		}
		if !ok {
			if buf, err = appendJSON(buf, args); err != nil {
				return nil, fmt.Errorf("agent: encoding %s arguments: %w", op, err)
			}
		}
	}
	buf = append(buf, '}')
	if n := len(buf) - wire.HeaderSize; n > wire.MaxPayload {
		// Nothing was sent: the stream and the sandbox are fine.
		return nil, wire.Errorf(wire.CodeTooLarge, "the call's arguments are %d bytes, over the %d byte limit of one message to the sandbox: send less at once", n, wire.MaxPayload)
	}
	wire.AppendHeader(buf[:0], 0, wire.FrameRequest, len(buf)-wire.HeaderSize)
	return buf, nil
}

// appendJSON appends v's JSON, as json.Marshal writes it (HTML escaped,
// no trailing newline), to buf.
func appendJSON(buf []byte, v any) ([]byte, error) {
	w := bytes.NewBuffer(buf)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return nil, err
	}
	b := w.Bytes()
	return b[:len(b)-1], nil // Encode ends with a newline
}

// Do sends a request and waits for its reply, decoding the result into out
// (when non-nil). A cancelled ctx abandons the request: the agent is told
// to stop it and Do waits a short while for it to confirm.
func (c *Client) Do(ctx context.Context, op string, args, out any) error {
	// A call reads its own reply (waitDirect) when nothing else shares
	// the stream and its wait can be ended: ctx cannot be cancelled, or a
	// deadline interrupts the read.
	direct := c.direct && (ctx.Done() == nil || c.deadliner != nil)
	call, err := c.start(ctx, op, args, Handlers{}, !direct)
	if err != nil {
		return err
	}
	var res json.RawMessage
	if direct {
		res, err = c.waitDirect(ctx, call)
	} else {
		res, err = call.WaitContext(ctx)
	}
	if err != nil {
		return err
	}
	if out != nil && len(res) > 0 {
		if fu, ok := out.(wire.FastUnmarshaler); ok && fu.UnmarshalFast(res) {
			// wire/fast.go
		} else if err := json.Unmarshal(res, out); err != nil {
			return fmt.Errorf("%w: bad %s result: %v", wire.ErrProtocol, op, err)
		}
		if br, ok := out.(blobReceiver); ok && call.blob != nil {
			br.ReceiveBlob(call.blob)
		}
	}
	return nil
}

// DoStreaming sends a request whose interim frames go to h and waits for
// its reply, returning the raw result (a command run to its end: its
// output streams to h.OnData). Like Do, the caller reads the reply itself
// when nothing else shares the stream, so it is woken by the reply and
// not by the background reader: a warm Commands.Run's host made 2.5-3
// context switches for the hand-off. A cancelled ctx is handled as in Do.
// A call that must also send input (Call.Write) uses Start.
func (c *Client) DoStreaming(ctx context.Context, op string, args any, h Handlers) (json.RawMessage, error) {
	direct := c.direct && (ctx.Done() == nil || c.deadliner != nil)
	call, err := c.start(ctx, op, args, h, !direct)
	if err != nil {
		return nil, err
	}
	if direct {
		return c.waitDirect(ctx, call)
	}
	return call.WaitContext(ctx)
}

// blobReceiver is a result whose bulk may travel in a Blob frame.
type blobReceiver interface{ ReceiveBlob([]byte) }

// Blob returns the raw bytes that came with the reply (nil if none). Call
// it after Wait.
func (call *Call) Blob() []byte {
	<-call.done
	return call.blob
}

// finished reports whether the call has its reply (or failed).
func (call *Call) finished() bool {
	select {
	case <-call.done:
		return true
	default:
		return false
	}
}

// Done is closed when the call has its reply (or failed).
func (call *Call) Done() <-chan struct{} { return call.done }

// Wait blocks until the reply and returns its result. An agent-side error
// is returned as *WireError.
func (call *Call) Wait() (json.RawMessage, error) {
	<-call.done
	if call.err != nil {
		return nil, call.err
	}
	if call.reply.Error != nil {
		return nil, call.reply.Error
	}
	return call.reply.Result, nil
}

// WaitContext is Wait, but a cancelled ctx cancels the request, waits up
// to two seconds for the agent to end it, and returns ctx's error.
func (call *Call) WaitContext(ctx context.Context) (json.RawMessage, error) {
	select {
	case <-call.done:
		return call.Wait()
	case <-ctx.Done():
		grace := time.NewTimer(cancelGrace) // from now: Cancel itself may wait for the stream
		defer grace.Stop()
		call.Cancel()
		select {
		case <-call.done:
		case <-grace.C:
		}
		return nil, ctx.Err()
	}
}

// Cancel asks the agent to abandon the request (killing its process). It
// gives up after cancelGrace when the stream takes nothing (an agent that
// reads nothing), as the callers' waits for the agent's answer do.
func (call *Call) Cancel() {
	ctx, stop := context.WithTimeout(context.Background(), cancelGrace)
	defer stop()
	_ = call.c.sendCtx(ctx, call.id, wire.FrameCancel, nil)
}

// cancelGrace bounds how long a cancelled call waits for the agent.
const cancelGrace = 2 * time.Second

// Signal sends a signal to the request's process.
func (call *Call) Signal(sr wire.SignalRequest) error {
	b, _ := json.Marshal(sr)
	return call.c.send(call.id, wire.FrameSignal, b)
}

// Ack returns n bytes of credit to the agent (see Handlers.ManualAck). It
// never blocks: the credit is sent by the client's ack writer.
func (call *Call) Ack(n int) {
	if n <= 0 {
		return
	}
	c := call.c
	c.amu.Lock()
	c.acks[call.id] += n
	c.amu.Unlock()
	select {
	case c.awake <- struct{}{}:
	default:
	}
}

// ackLoop sends the credit Ack gathered, all pending acks in one write,
// until the stream is gone.
func (c *Client) ackLoop() {
	defer c.readers.Done()
	var buf []byte
	for {
		select {
		case <-c.awake:
		case <-c.dead:
			return
		}
		c.amu.Lock()
		var acks map[uint32]int
		if len(c.acks) > 0 {
			acks, c.acks = c.acks, map[uint32]int{}
		}
		c.amu.Unlock()
		buf = buf[:0]
		for id, n := range acks {
			// An ack frame carries a uint32; a window is far smaller, but
			// split anyway rather than wrap.
			for n > 0 {
				m := min(n, 1<<30)
				buf = wire.AppendFrame(buf, id, wire.FrameAck, wire.AckPayload(m))
				n -= m
			}
		}
		if len(buf) == 0 {
			continue
		}
		if err := c.write(buf); errors.Is(err, ErrStalled) {
			// Nothing was sent: keep the credit for the next try (lost,
			// the calls' output would stall for good once the agent
			// reads again), and try again.
			c.amu.Lock()
			for id, n := range acks {
				c.acks[id] += n
			}
			c.amu.Unlock()
			select {
			case c.awake <- struct{}{}:
			default:
			}
		} // any other failure ends the reader too
	}
}

// Write sends p to the request's stdin (or upload), blocking while the
// flow-control window is full.
func (call *Call) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), wire.ChunkSize)
		call.cmu.Lock()
		for call.credit < n && !call.closed {
			if call.credit > 0 {
				n = call.credit
				break
			}
			call.cond.Wait()
		}
		if call.closed {
			call.cmu.Unlock()
			return written, io.ErrClosedPipe
		}
		call.credit -= n
		call.cmu.Unlock()
		if err := call.c.send(call.id, wire.FrameStdin, p[:n]); err != nil {
			if errors.Is(err, ErrStalled) {
				// Nothing was sent: the credit is still the call's.
				call.cmu.Lock()
				call.credit += n
				call.cmu.Unlock()
			}
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseInput signals end of input.
func (call *Call) CloseInput() error { return call.c.send(call.id, wire.FrameStdinClose, nil) }
