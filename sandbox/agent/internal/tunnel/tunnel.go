// Package tunnel carries TCP connections over the agent's stream, for both
// ends: the agent's egress proxy (package agent/server) accepts connections
// on the sandbox's own loopback and the client (package agent) hands them to
// the host, where the egress policy decides. It is internal: the frames are
// the protocol's (package wire), the table of connections is shared code.
package tunnel

import (
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"

	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Tunnelled connections: the sandbox's egress proxy (proxy.go) accepts TCP
// connections on the sandbox's own loopback and carries each one over the
// agent's stream to the host, where the egress policy decides and the host
// dials. Both ends of one such connection are a Conn; the frames are
// ConnOpen (agent->client, names a new connection id in its own id space,
// apart from request ids), ConnData and ConnAck (either way, flow
// controlled like request data with a per-connection window), ConnEOF
// (the sender writes no more: a half close) and ConnClose (the sender
// dropped the connection: the receiver drops it too).
//
// The sandbox side is untrusted: the host bounds how many tunnelled
// connections may exist at once (maxTunnelConns) and how many bytes each
// may have buffered (connWindow), and treats any excess as a protocol
// error, which ends the agent's stream.

const (
	// connWindow is the per-connection credit for ConnData bytes: the
	// most either side buffers per connection, so with maxTunnelConns
	// a hostile agent can make the host hold at most 128 MiB.
	connWindow = 512 << 10
	// connAckEvery batches acks: credit goes back once this much was
	// consumed (or the reader drained its queue), not once per read.
	connAckEvery = connWindow / 4
	// connChunk is the largest ConnData frame. Measured on a busy 2-core
	// machine, 128 KiB frames were as fast as 512 KiB ones and faster
	// than 32 KiB ones (BenchmarkEgressDownload).
	connChunk = 128 << 10
	// maxTunnelConns bounds the tunnelled connections open at once
	// (wire.MaxTunnelConns).
	maxTunnelConns = wire.MaxTunnelConns
)

// Tunnel is one side's table of tunnelled connections.
type Tunnel struct {
	send func(id uint32, t wire.FrameType, payload []byte) error
	// write writes encoded frames with one Write. ConnData frames are
	// built in their connection's own buffer, a download's bytes read
	// straight into it (ReadFrom): allocating and copying each frame, as
	// send does, took a 10 MB tunnelled download from 9 to 22 ms.
	write func(frames []byte) error

	mu     sync.Mutex
	conns  map[uint32]*Conn
	closed bool
	// accepted queues connections the peer opened (host side only).
	accepted chan *Conn
	local    net.Addr
}

// New returns an empty table whose frames go out through send (control
// frames) and write (encoded ConnData frames, one Write each); local names
// this side's end of every connection.
func New(send func(uint32, wire.FrameType, []byte) error, write func([]byte) error, local net.Addr) *Tunnel {
	return &Tunnel{send: send, write: write, conns: map[uint32]*Conn{}, accepted: make(chan *Conn, maxTunnelConns), local: local}
}

// Add registers a connection under id.
func (tn *Tunnel) Add(id uint32, remote net.Addr) (*Conn, error) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if tn.closed {
		return nil, net.ErrClosed
	}
	if _, dup := tn.conns[id]; dup {
		return nil, fmt.Errorf("%w: duplicate connection id %d", wire.ErrProtocol, id)
	}
	if len(tn.conns) >= maxTunnelConns {
		return nil, fmt.Errorf("%w: more than %d tunnelled connections", wire.ErrProtocol, maxTunnelConns)
	}
	c := &Conn{id: id, tn: tn, credit: connWindow, local: tn.local, remote: remote}
	c.cond = sync.NewCond(&c.mu)
	tn.conns[id] = c
	return c, nil
}

// Get returns connection id, nil if there is none.
func (tn *Tunnel) Get(id uint32) *Conn {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.conns[id]
}

// Remove forgets connection id.
func (tn *Tunnel) Remove(id uint32) {
	tn.mu.Lock()
	delete(tn.conns, id)
	tn.mu.Unlock()
}

// Deliver handles one Conn* frame from the peer. It runs on the read loop
// and never blocks or writes.
func (tn *Tunnel) Deliver(f wire.Frame) error {
	if f.Type == wire.FrameConnOpen {
		c, err := tn.Add(f.ID, Addr("sandbox"))
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		select {
		case tn.accepted <- c:
		default:
			return fmt.Errorf("%w: more than %d unaccepted connections", wire.ErrProtocol, maxTunnelConns)
		}
		return nil
	}
	c := tn.Get(f.ID)
	if c == nil {
		return nil // a connection this side already dropped
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f.Type {
	case wire.FrameConnData:
		if c.rEOF {
			return fmt.Errorf("%w: data after end of connection %d", wire.ErrProtocol, f.ID)
		}
		if c.queued+len(f.Payload) > connWindow {
			return fmt.Errorf("%w: connection %d sent past its flow-control window", wire.ErrProtocol, f.ID)
		}
		c.queued += len(f.Payload)
		c.in = append(c.in, f.Payload)
	case wire.FrameConnAck:
		n, err := wire.ParseAck(f.Payload)
		if err != nil {
			return err
		}
		c.credit += n
	case wire.FrameConnEOF:
		c.rEOF = true
		if c.wEOF {
			tn.Remove(c.id)
		}
	case wire.FrameConnClose:
		c.reset = true
		tn.Remove(c.id)
	}
	c.cond.Broadcast()
	return nil
}

// Shutdown fails every connection (the stream is gone).
func (tn *Tunnel) Shutdown() {
	tn.mu.Lock()
	tn.closed = true
	conns := tn.conns
	tn.conns = map[uint32]*Conn{}
	tn.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.reset = true
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	close(tn.accepted)
}

// Conn is one end of a tunnelled connection. It is a net.Conn with
// deadlines and half close (CloseWrite).
type Conn struct {
	id            uint32
	tn            *Tunnel
	local, remote net.Addr

	mu   sync.Mutex
	cond *sync.Cond
	// inbound: chunks not yet read, their size, bytes read but not acked
	in      [][]byte
	queued  int
	unacked int
	// outbound credit
	credit int
	// rEOF: the peer writes no more; wEOF: we wrote our EOF; reset: the
	// peer dropped the connection or the stream died; closed: Close ran.
	rEOF, wEOF, reset, closed bool
	rdl, wdl                  deadline

	// wmu serialises writers of wbuf, the buffer ConnData frames are
	// built in.
	wmu  sync.Mutex
	wbuf []byte
}

// deadline is a net.Conn deadline: a time and the timer that wakes the
// waiters when it passes.
type deadline struct {
	t     time.Time
	timer *time.Timer
}

func (c *Conn) setDeadline(d *deadline, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.t = t
	if !t.IsZero() {
		d.timer = time.AfterFunc(time.Until(t), func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
	}
	c.cond.Broadcast()
}

func (d *deadline) passed() bool { return !d.t.IsZero() && !time.Now().Before(d.t) }

// Read reads the peer's bytes; io.EOF after the peer's half close.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	for len(c.in) == 0 && !c.rEOF && !c.reset && !c.closed {
		if c.rdl.passed() {
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		c.cond.Wait()
	}
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	if len(c.in) == 0 {
		reset := c.reset && !c.rEOF
		c.mu.Unlock()
		if reset {
			return 0, ErrConnReset
		}
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && len(c.in) > 0 {
		m := copy(p[n:], c.in[0])
		n += m
		if m == len(c.in[0]) {
			c.in[0] = nil
			c.in = c.in[1:]
		} else {
			c.in[0] = c.in[0][m:]
		}
	}
	c.mu.Unlock()
	c.consumed(n)
	return n, nil
}

// WriteTo writes the peer's bytes to w as they come, chunk by chunk
// without copying them first (io.Copy from a tunnelled connection uses
// it), until the peer's half close.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		c.mu.Lock()
		for len(c.in) == 0 && !c.rEOF && !c.reset && !c.closed {
			if c.rdl.passed() {
				c.mu.Unlock()
				return total, os.ErrDeadlineExceeded
			}
			c.cond.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			return total, net.ErrClosed
		}
		if len(c.in) == 0 {
			reset := c.reset && !c.rEOF
			c.mu.Unlock()
			if reset {
				return total, ErrConnReset
			}
			return total, nil
		}
		chunks := c.in
		c.in = nil
		c.mu.Unlock()
		for i, b := range chunks {
			n, err := w.Write(b)
			total += int64(n)
			c.consumed(n)
			if err != nil {
				// Keep what was not written, for a later read.
				c.mu.Lock()
				c.in = append(append([][]byte{b[n:]}, chunks[i+1:]...), c.in...)
				c.mu.Unlock()
				return total, err
			}
		}
	}
}

// consumed accounts for n bytes taken out of the queue and returns credit
// to the peer once enough has gathered.
func (c *Conn) consumed(n int) {
	c.mu.Lock()
	c.queued -= n
	c.unacked += n
	ack := 0
	if c.unacked >= connAckEvery {
		ack, c.unacked = c.unacked, 0
	}
	c.mu.Unlock()
	if ack > 0 {
		_ = c.tn.send(c.id, wire.FrameConnAck, wire.AckPayload(ack))
	}
}

// ErrConnReset is what reads and writes return once the peer dropped the
// connection.
var ErrConnReset = errors.New("tunnelled connection reset by the other side")

// Write sends p, waiting for credit from the peer.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	written := 0
	for len(p) > 0 {
		n, err := c.reserve(len(p))
		if err != nil {
			return written, err
		}
		if err := c.sendData(copy(c.frameBuf(), p[:n])); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// ReadFrom sends what r yields, reading it straight into the frame
// buffer (io.Copy to a tunnelled connection uses it).
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var total int64
	for {
		n, err := c.reserve(connChunk)
		if err != nil {
			return total, err
		}
		m, rerr := r.Read(c.frameBuf()[:n])
		c.unreserve(n - m)
		if m > 0 {
			if err := c.sendData(m); err != nil {
				return total, err
			}
			total += int64(m)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// reserve waits for credit and takes up to want bytes of it.
func (c *Conn) reserve(want int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.credit == 0 && !c.reset && !c.closed && !c.wEOF && !c.wdl.passed() {
		c.cond.Wait()
	}
	switch {
	case c.closed, c.wEOF:
		return 0, net.ErrClosed
	case c.reset:
		return 0, ErrConnReset
	case c.wdl.passed():
		return 0, os.ErrDeadlineExceeded
	}
	n := min(want, connChunk, c.credit)
	c.credit -= n
	return n, nil
}

// unreserve gives back credit reserve took but a write did not use.
func (c *Conn) unreserve(n int) {
	if n > 0 {
		c.mu.Lock()
		c.credit += n
		c.mu.Unlock()
	}
}

// frameBuf returns the payload part of the frame buffer (wmu held).
func (c *Conn) frameBuf() []byte {
	if c.wbuf == nil {
		c.wbuf = make([]byte, wire.HeaderSize+connChunk)
	}
	return c.wbuf[wire.HeaderSize:]
}

// sendData sends the frame buffer's first n payload bytes (wmu held).
func (c *Conn) sendData(n int) error {
	wire.AppendHeader(c.wbuf[:0], c.id, wire.FrameConnData, n)
	return c.tn.write(c.wbuf[:wire.HeaderSize+n])
}

// CloseWrite sends the peer end of data; reads go on.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	if c.wEOF || c.closed || c.reset {
		c.mu.Unlock()
		return nil
	}
	c.wEOF = true
	both := c.rEOF
	c.cond.Broadcast()
	c.mu.Unlock()
	if both {
		c.tn.Remove(c.id)
	}
	return c.tn.send(c.id, wire.FrameConnEOF, nil)
}

// Close drops the connection; the peer drops its end too.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	notify := !c.reset && !(c.rEOF && c.wEOF)
	c.in, c.queued = nil, 0
	for _, d := range []*deadline{&c.rdl, &c.wdl} {
		if d.timer != nil {
			d.timer.Stop()
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.tn.Remove(c.id)
	if notify {
		_ = c.tn.send(c.id, wire.FrameConnClose, nil)
	}
	return nil
}

// LocalAddr, RemoteAddr and the deadlines make Conn a net.Conn.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr names the far end.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetReadDeadline is net.Conn's.
func (c *Conn) SetReadDeadline(t time.Time) error { c.setDeadline(&c.rdl, t); return nil }

// SetWriteDeadline is net.Conn's.
func (c *Conn) SetWriteDeadline(t time.Time) error { c.setDeadline(&c.wdl, t); return nil }

// SetDeadline is net.Conn's.
func (c *Conn) SetDeadline(t time.Time) error {
	c.setDeadline(&c.rdl, t)
	c.setDeadline(&c.wdl, t)
	return nil
}

// Addr names an end of a tunnelled connection.
type Addr string

// Network names the tunnel as the network.
func (a Addr) Network() string { return "agent-tunnel" }

// String is the name.
func (a Addr) String() string { return string(a) }

// Listener is the host's view of the sandbox's egress proxy: every
// connection a program in the sandbox makes to the proxy arrives here.
type Listener struct {
	tn   *Tunnel
	once sync.Once
	done chan struct{}
}

// Accept waits for the next connection made to the proxy in the sandbox.
// It fails with net.ErrClosed once the listener or the agent's stream is
// closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c, ok := <-l.tn.accepted:
		if !ok {
			return nil, net.ErrClosed
		}
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept. Connections the sandbox makes afterwards are
// dropped when the stream closes.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr names the listener.
func (l *Listener) Addr() net.Addr { return l.tn.local }

// NewListener returns the host's listener over tn's accepted connections.
func NewListener(tn *Tunnel) *Listener {
	return &Listener{tn: tn, done: make(chan struct{})}
}

// Send sends one control frame (ConnOpen from the agent's proxy).
func (tn *Tunnel) Send(id uint32, t wire.FrameType, payload []byte) error {
	return tn.send(id, t, payload)
}
