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
	"sync"
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

// Client speaks the agent protocol from the host side. It is safe for
// concurrent use; each call gets its own request id on the shared stream.
type Client struct {
	conn  io.ReadWriteCloser
	hello wire.HelloReply

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
	tunnel *tunnel.Tunnel
}

// Handlers receive a streaming call's interim frames. They run on the
// client's single reader goroutine and must not block.
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
			acks: map[uint32]int{}, awake: make(chan struct{}, 1)}
		c.tunnel = tunnel.New(c.send, c.write, tunnel.Addr("egress proxy "+r.rep.Proxy))
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

// write writes encoded frames with one Write (the tunnel's ConnData).
func (c *Client) write(frames []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if _, err := c.conn.Write(frames); err != nil {
		return fmt.Errorf("%w: %v", ErrDead, err)
	}
	return nil
}

// writeWith runs fn with the stream's write lock held: the tunnel writes
// a spliced ConnData frame in parts. A failure may leave half a frame, so
// it ends the stream.
func (c *Client) writeWith(fn func(io.Writer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
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
	err := c.conn.Close()
	c.readers.Wait()
	return err
}

func (c *Client) readLoop() {
	defer c.readers.Done()
	var src io.Reader = c.conn
	if c.hello.ProxyHandoff {
		src = c.tunnel.HandoffReader(c.conn) // keeps the handed-over sockets
	}
	r := wire.NewFrameReader(src)
	var err error
	for {
		var f wire.Frame
		f, err = wire.ReadFrame(r)
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
	c.tunnel.Shutdown()
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
		call.finish(wire.Reply{}, err)
	}
}

func (c *Client) deliver(f wire.Frame) error {
	if f.Type >= wire.FrameConnOpen && f.Type <= wire.FrameConnHandoff {
		if c.hello.Proxy == "" {
			return fmt.Errorf("%w: %s frame without an egress proxy", wire.ErrProtocol, f.Type)
		}
		return c.tunnel.Deliver(f)
	}
	c.mu.Lock()
	call := c.calls[f.ID]
	if f.Type == wire.FrameReply {
		delete(c.calls, f.ID)
	}
	c.mu.Unlock()
	if call == nil {
		return nil // a call we abandoned
	}
	switch f.Type {
	case wire.FrameReply:
		rep, err := parseReply(f.Payload)
		if err != nil {
			call.finish(wire.Reply{}, fmt.Errorf("%w: bad reply: %v", wire.ErrProtocol, err))
			return nil
		}
		call.finish(rep, nil)
	case wire.FrameBlob:
		// Only the reader goroutine touches blob before finish, and
		// readers of it wait for done.
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
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if err := wire.WriteFrame(c.conn, id, t, payload); err != nil {
		return fmt.Errorf("%w: %v", ErrDead, err)
	}
	return nil
}

// Start sends a request and returns at once; the reply arrives through
// Call.Wait.
func (c *Client) Start(op string, args any, h Handlers) (*Call, error) {
	frame, err := encodeRequest(op, args)
	if err != nil {
		return nil, err
	}
	call := &Call{c: c, h: h, done: make(chan struct{}), credit: wire.Window}
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
	binary.BigEndian.PutUint32(frame[4:8], call.id)
	if err := c.write(frame); err != nil {
		c.mu.Lock()
		delete(c.calls, call.id)
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
	buf = append(buf, `{"op":`...)
	var err error
	if buf, err = appendJSON(buf, op); err != nil {
		return nil, err
	}
	if args != nil {
		buf = append(buf, `,"args":`...)
		if buf, err = appendJSON(buf, args); err != nil {
			return nil, fmt.Errorf("agent: encoding %s arguments: %w", op, err)
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
			return fmt.Errorf("%w: bad %s result: %v", wire.ErrProtocol, op, err)
		}
		if br, ok := out.(blobReceiver); ok && call.blob != nil {
			br.ReceiveBlob(call.blob)
		}
	}
	return nil
}

// blobReceiver is a result whose bulk may travel in a Blob frame.
type blobReceiver interface{ ReceiveBlob([]byte) }

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
func (call *Call) Cancel() { _ = call.c.send(call.id, wire.FrameCancel, nil) }

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
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseInput signals end of input.
func (call *Call) CloseInput() error { return call.c.send(call.id, wire.FrameStdinClose, nil) }
