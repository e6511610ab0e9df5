package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrDead is returned by every pending and later call once the agent's
// stream has closed or failed: the agent (or its sandbox) is gone.
var ErrDead = errors.New("sandbox agent is gone")

// ErrClosed is ErrDead when the client itself closed the stream (Close):
// calls it cut were ended on purpose, not by a death. errors.Is(ErrClosed,
// ErrDead) holds.
var ErrClosed = fmt.Errorf("%w: the client closed the stream", ErrDead)

// Client speaks the agent protocol from the host side. It is safe for
// concurrent use; each call gets its own request id on the shared stream.
type Client struct {
	conn  io.ReadWriteCloser
	hello HelloReply

	wmu sync.Mutex

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

	// tunnel holds the connections the agent's egress proxy carries
	// (Hello.Proxy); see Egress.
	tunnel *tunnel
}

// Handlers receive a streaming call's interim frames. They run on the
// client's single reader goroutine and must not block.
type Handlers struct {
	// OnData receives stdout/stderr (or download) bytes. Unless ManualAck
	// is set, credit is returned to the agent as soon as it returns.
	OnData func(t FrameType, b []byte)
	// OnEvent receives interim events (e.g. the process started).
	OnEvent func(Event)
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
	reply  Reply
	err    error
	cmu    sync.Mutex
	cond   *sync.Cond
	credit int
	closed bool
	blob   []byte // a FrameBlob's payload, read before the reply
}

// Dial performs the handshake over conn and starts the client's reader.
// ctx bounds the handshake only.
func Dial(ctx context.Context, conn io.ReadWriteCloser, h Hello) (*Client, error) {
	h.Version = Version
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	type result struct {
		rep HelloReply
		err error
	}
	ch := make(chan result, 1)
	go func() {
		if err := WriteFrame(conn, 0, FrameHello, b); err != nil {
			ch <- result{err: fmt.Errorf("%w: sending hello: %v", ErrDead, err)}
			return
		}
		f, err := ReadFrame(conn)
		if err != nil {
			ch <- result{err: fmt.Errorf("%w: the agent did not answer the handshake: %v", ErrDead, err)}
			return
		}
		if f.Type != FrameHelloOK {
			ch <- result{err: fmt.Errorf("%w: handshake answered with %s", ErrProtocol, f.Type)}
			return
		}
		var rep Reply
		if err := json.Unmarshal(f.Payload, &rep); err != nil {
			ch <- result{err: fmt.Errorf("%w: bad handshake reply: %v", ErrProtocol, err)}
			return
		}
		if rep.Error != nil {
			ch <- result{err: rep.Error}
			return
		}
		var hr HelloReply
		if err := json.Unmarshal(rep.Result, &hr); err != nil {
			ch <- result{err: fmt.Errorf("%w: bad handshake reply: %v", ErrProtocol, err)}
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
			acks: map[uint32]int{}, awake: make(chan struct{}, 1)}
		c.tunnel = newTunnel(c.send, c.write, tunnelAddr("egress proxy "+r.rep.Proxy))
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

// Hello returns what the agent reported at the handshake.
func (c *Client) Hello() HelloReply { return c.hello }

// Egress returns the connections programs in the sandbox make to the
// agent's egress proxy (Hello.Proxy), as a listener: each accepted
// net.Conn carries one connection's bytes, whose first bytes are the
// program's HTTP proxy request. The caller decides what to do with them.
// Accept fails with net.ErrClosed once the stream is gone. Call it once.
func (c *Client) Egress() net.Listener {
	return &tunnelListener{tn: c.tunnel, done: make(chan struct{})}
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
	err := c.conn.Close()
	c.readers.Wait()
	return err
}

func (c *Client) readLoop() {
	defer c.readers.Done()
	r := newFrameReader(c.conn)
	var err error
	for {
		var f Frame
		f, err = ReadFrame(r)
		if err != nil {
			break
		}
		if err = c.deliver(f); err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
		err = ErrDead
	} else {
		err = fmt.Errorf("%w: %v", ErrDead, err)
	}
	c.conn.Close()
	c.tunnel.shutdown()
	c.mu.Lock()
	if c.closing {
		err = ErrClosed
	}
	c.deadErr = err
	close(c.dead)
	calls := c.calls
	c.calls = map[uint32]*Call{}
	c.mu.Unlock()
	for _, call := range calls {
		call.finish(Reply{}, err)
	}
}

func (c *Client) deliver(f Frame) error {
	if f.Type >= FrameConnOpen && f.Type <= FrameConnClose {
		if c.hello.Proxy == "" {
			return fmt.Errorf("%w: %s frame without an egress proxy", ErrProtocol, f.Type)
		}
		return c.tunnel.deliver(f)
	}
	c.mu.Lock()
	call := c.calls[f.ID]
	if f.Type == FrameReply {
		delete(c.calls, f.ID)
	}
	c.mu.Unlock()
	if call == nil {
		return nil // a call we abandoned
	}
	switch f.Type {
	case FrameReply:
		rep, err := parseReply(f.Payload)
		if err != nil {
			call.finish(Reply{}, fmt.Errorf("%w: bad reply: %v", ErrProtocol, err))
			return nil
		}
		call.finish(rep, nil)
	case FrameBlob:
		// Only the reader goroutine touches blob before finish, and
		// readers of it wait for done.
		if call.blob != nil {
			return fmt.Errorf("%w: two blob frames for request %d", ErrProtocol, f.ID)
		}
		call.blob = f.Payload
	case FrameStdout, FrameStderr:
		if call.h.OnData != nil {
			call.h.OnData(f.Type, f.Payload)
		}
		if !call.h.ManualAck {
			call.Ack(len(f.Payload))
		}
	case FrameEvent:
		var ev Event
		if err := json.Unmarshal(f.Payload, &ev); err == nil && call.h.OnEvent != nil {
			call.h.OnEvent(ev)
		}
	case FrameAck:
		n, err := parseAck(f.Payload)
		if err != nil {
			return err
		}
		call.cmu.Lock()
		call.credit += n
		call.cond.Broadcast()
		call.cmu.Unlock()
	default:
		return fmt.Errorf("%w: unexpected %s frame from agent", ErrProtocol, f.Type)
	}
	return nil
}

// parseReply decodes a Reply frame. The agent writes a successful reply as
// replyPrefix + result + "}"; that shape is cut out without scanning the
// result, which its consumer decodes (and so validates) anyway. Anything
// else goes through the JSON decoder.
func parseReply(p []byte) (Reply, error) {
	if len(p) > len(replyPrefix) && string(p[:len(replyPrefix)]) == replyPrefix && p[len(p)-1] == '}' {
		return Reply{Result: json.RawMessage(p[len(replyPrefix) : len(p)-1])}, nil
	}
	var rep Reply
	err := json.Unmarshal(p, &rep)
	return rep, err
}

func (call *Call) finish(rep Reply, err error) {
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

func (c *Client) send(id uint32, t FrameType, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if err := WriteFrame(c.conn, id, t, payload); err != nil {
		return fmt.Errorf("%w: %v", ErrDead, err)
	}
	return nil
}

// Start sends a request and returns at once; the reply arrives through
// Call.Wait.
func (c *Client) Start(op string, args any, h Handlers) (*Call, error) {
	var raw json.RawMessage
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("agent: encoding %s arguments: %w", op, err)
		}
		raw = b
	}
	b, err := json.Marshal(Request{Op: op, Args: raw})
	if err != nil {
		return nil, err
	}
	call := &Call{c: c, h: h, done: make(chan struct{}), credit: Window}
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
	c.mu.Unlock()
	if err := c.send(call.id, FrameRequest, b); err != nil {
		c.mu.Lock()
		delete(c.calls, call.id)
		c.mu.Unlock()
		return nil, err
	}
	return call, nil
}

// Do sends a request and waits for its reply, decoding the result into out
// (when non-nil). A cancelled ctx abandons the request: the agent is told
// to stop it and Do waits a short while for it to confirm.
func (c *Client) Do(ctx context.Context, op string, args, out any) error {
	call, err := c.Start(op, args, Handlers{})
	if err != nil {
		return err
	}
	res, err := call.WaitContext(ctx)
	if err != nil {
		return err
	}
	if out != nil && len(res) > 0 {
		if err := json.Unmarshal(res, out); err != nil {
			return fmt.Errorf("%w: bad %s result: %v", ErrProtocol, op, err)
		}
		if br, ok := out.(blobReceiver); ok && call.blob != nil {
			br.receiveBlob(call.blob)
		}
	}
	return nil
}

// blobReceiver is a result whose bulk may travel in a Blob frame.
type blobReceiver interface{ receiveBlob([]byte) }

// Blob returns the raw bytes that came with the reply (nil if none). Call
// it after Wait.
func (call *Call) Blob() []byte {
	<-call.done
	return call.blob
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
		call.Cancel()
		select {
		case <-call.done:
		case <-time.After(2 * time.Second):
		}
		return nil, ctx.Err()
	}
}

// Cancel asks the agent to abandon the request (killing its process).
func (call *Call) Cancel() { _ = call.c.send(call.id, FrameCancel, nil) }

// Signal sends a signal to the request's process.
func (call *Call) Signal(sr SignalRequest) error {
	b, _ := json.Marshal(sr)
	return call.c.send(call.id, FrameSignal, b)
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
				buf = appendFrame(buf, id, FrameAck, ackPayload(m))
				n -= m
			}
		}
		if len(buf) == 0 {
			continue
		}
		c.wmu.Lock()
		if c.Err() == nil {
			_, _ = c.conn.Write(buf) // a failed write ends the reader too
		}
		c.wmu.Unlock()
	}
}

// Write sends p to the request's stdin (or upload), blocking while the
// flow-control window is full.
func (call *Call) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), chunkSize)
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
		if err := call.c.send(call.id, FrameStdin, p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseInput signals end of input.
func (call *Call) CloseInput() error { return call.c.send(call.id, FrameStdinClose, nil) }

// Decode unmarshals a call's result.
func Decode[T any](res json.RawMessage, err error) (T, error) {
	var v T
	if err != nil {
		return v, err
	}
	if len(res) > 0 {
		if err := json.Unmarshal(res, &v); err != nil {
			return v, fmt.Errorf("%w: bad result: %v", ErrProtocol, err)
		}
	}
	return v, nil
}
