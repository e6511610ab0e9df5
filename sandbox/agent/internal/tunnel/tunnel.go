// Package tunnel carries TCP connections over the agent's stream, for both
// ends: the agent's egress proxy (package agent/server) accepts connections
// on the sandbox's own loopback and the client (package agent) hands them to
// the host, where the egress policy decides. It is internal: the frames are
// the protocol's (package wire), the table of connections is shared code.
//
// On Linux, where the stream is a file descriptor (the local backend's
// socketpair), a download's bytes never pass through either process: the
// host splices the destination's socket into the stream, the agent
// splices each connection's bytes into a pipe of its own and on to the
// program's socket (UseStream, splice_linux.go). Elsewhere, and on a
// container's attach stream, they are copied.
package tunnel

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Tunnelled connections: the sandbox's egress proxy (agent/server/proxy.go) accepts TCP
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
// may have buffered (windowToHost), and treats any excess as a protocol
// error, which ends the agent's stream.

const (
	// windowToHost and windowToAgent are the per-connection credit for
	// ConnData bytes, the most the receiving side buffers per
	// connection. What the host buffers is bounded: with maxTunnelConns
	// a hostile agent can make it hold at most 128 MiB. The agent's
	// window (a download's) is larger, and is the largest pipe an
	// unprivileged process may make (fs.pipe-max-size), which holds it
	// (UseStream's Receive). Measured on a busy 2-core machine with
	// splicing (BenchmarkEgressDownload's plain HTTP 10 MB, builds
	// alternated in one session, CPU per download): 512 KiB window and
	// 256 KiB frames, agent ~4.2 ms and host proxy ~3.9 ms; 1 MiB and
	// 512 KiB frames, ~3.2 and ~2.6 ms; 1 MiB frames no better.
	windowToHost  = 512 << 10
	windowToAgent = 1 << 20
	// spliceChunk is the largest spliced ConnData frame (see above): the
	// host sends what one splice from the destination's socket yields,
	// up to this, through a pipe of this size.
	spliceChunk = 512 << 10
	// copyChunk is the largest ConnData frame built in memory, the size
	// of a connection's frame buffer. Measured copying, 128 KiB frames
	// were as fast as 512 KiB ones and faster than 32 KiB ones.
	copyChunk = 128 << 10
	// streamSendBuffer is the send buffer a splicing sender asks for on
	// the stream (the host's is 208 KiB by default, which made every
	// second frame wait): a connection's window in flight at once.
	streamSendBuffer = 2 * windowToAgent
	// maxTunnelConns bounds the tunnelled connections open at once
	// (wire.MaxTunnelConns).
	maxTunnelConns = wire.MaxTunnelConns
)

// receivePipeSize is the size of a connection's incoming pipe: its
// window (tests make it smaller, to fill it). A smaller pipe than the
// window fills whenever the program reads slower than the host sends,
// and the rest of each frame is copied: with 256 KiB pipes the agent
// spent twice the CPU of 1 MiB ones per download.
var receivePipeSize = windowToAgent

// maxReceivePipes bounds the connections of one agent that have a pipe;
// more copy their bytes. Pipe pages beyond the default are counted per
// user against fs.pipe-user-pages-soft (16384 pages, 64 MiB, by
// default), and past it every new pipe of the user gets two pages: 8
// pipes of 1 MiB are an eighth of it.
const maxReceivePipes = 8

// sendPipes are the host's idle outgoing pipes: one is needed only while
// a ConnData frame is being spliced, and is empty between frames, so
// connections share them.
var sendPipes struct {
	mu   sync.Mutex
	idle []*kpipe
}

// maxIdleSendPipes bounds the idle outgoing pipes kept.
const maxIdleSendPipes = 8

func getSendPipe() (*kpipe, error) {
	sendPipes.mu.Lock()
	if n := len(sendPipes.idle); n > 0 {
		p := sendPipes.idle[n-1]
		sendPipes.idle = sendPipes.idle[:n-1]
		sendPipes.mu.Unlock()
		return p, nil
	}
	sendPipes.mu.Unlock()
	return newPipe(spliceChunk)
}

// putSendPipe keeps an empty pipe for the next frame, or closes it.
func putSendPipe(p *kpipe, empty bool) {
	sendPipes.mu.Lock()
	if empty && len(sendPipes.idle) < maxIdleSendPipes {
		sendPipes.idle = append(sendPipes.idle, p)
		p = nil
	}
	sendPipes.mu.Unlock()
	p.close()
}

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
	accepted chan net.Conn
	local    net.Addr
	// receivePipes counts the connections holding a pipe; noSplice is
	// set when a splice from the stream was refused as unsupported.
	receivePipes int
	noSplice     atomic.Bool

	// stream is the agent's stream as a file descriptor (UseStream),
	// nil when it is not one (Docker's attach stream) or splice(2) is
	// not there; streamWrite runs a function with the stream's write
	// lock held. spliceSend and pipes say what moves by splice: this
	// side's outgoing ConnData (from a socket) and the incoming.
	stream      syscall.RawConn
	streamWrite func(func(io.Writer) error) error
	spliceSend  bool
	pipes       bool

	// ho holds connections handed over as sockets (handoff.go).
	ho handoff
}

// Splicing says which of a side's ConnData bytes UseStream moves with
// splice(2) instead of copying them through the process.
type Splicing struct {
	// Send: a connection's bytes read from a TCP socket (ReadFrom) go to
	// the stream through a pipe, never into the process: the host's
	// download direction.
	Send bool
	// Receive: a connection's incoming bytes go from the stream into a
	// pipe of its own, and from there to the socket its WriteTo writes to
	// (the agent's download direction, to the program's socket). Each
	// connection then holds two more descriptors.
	Receive bool
	// HandOff: the agent sends proxy connections' sockets themselves to
	// the host (HandOff, handoff.go), where the stream is a unix socket
	// and the host asked for them (Hello.ProxyHandoff).
	HandOff bool
}

// UseStream lets tn move connection bytes between sockets and stream, the
// agent's stream (the end this side reads and writes), with splice(2)
// where the system has it (Linux) and stream is a file descriptor
// (syscall.Conn: the local backend's socketpair). Elsewhere, or when a
// splice fails as unsupported, the bytes are copied as before. write runs
// its function with the stream's write lock held; the function writes
// one frame, and a failure leaves the stream broken (half a frame), so
// write must then end the stream. Call it before any connection exists.
//
// Measured on a busy 2-core machine (BenchmarkEgressDownload, plain HTTP,
// 10 MB, builds alternated in one session): copying, the host proxy
// spent 6.5-7.6 ms of CPU per download and the agent 8-12.7 ms (two
// copies each, a 128 KiB allocation per frame in the agent); splicing,
// 2.4-3.3 and 3.3-4.7 ms.
func (tn *Tunnel) UseStream(stream any, write func(func(io.Writer) error) error, how Splicing) {
	sc, ok := stream.(syscall.Conn)
	if !ok || !spliceSupported {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	tn.stream, tn.streamWrite, tn.spliceSend, tn.pipes = rc, write, how.Send, how.Receive
	if how.HandOff && isUnixStream(rc) {
		tn.ho.rc, tn.ho.write = rc, write
	}
	if how.Send {
		growSendBuffer(rc, streamSendBuffer)
	}
}

// New returns an empty table whose frames go out through send (control
// frames) and write (encoded ConnData frames, one Write each); local names
// this side's end of every connection.
func New(send func(uint32, wire.FrameType, []byte) error, write func([]byte) error, local net.Addr) *Tunnel {
	return &Tunnel{send: send, write: write, conns: map[uint32]*Conn{}, accepted: make(chan net.Conn, maxTunnelConns), local: local}
}

// Add registers a connection the agent's proxy accepted under id.
func (tn *Tunnel) Add(id uint32, remote net.Addr) (*Conn, error) {
	return tn.add(id, remote, windowToAgent, windowToHost)
}

// add registers a connection under id that buffers at most window
// incoming bytes and may send credit bytes before the peer's first ack.
func (tn *Tunnel) add(id uint32, remote net.Addr, window, credit int) (c *Conn, err error) {
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
	c = &Conn{id: id, tn: tn, window: window, credit: credit, local: tn.local, remote: remote}
	c.cond = sync.NewCond(&c.mu)
	if tn.pipes && tn.receivePipes < maxReceivePipes {
		// A connection that cannot get a pipe (descriptor or
		// pipe-user-pages limits) copies its bytes.
		if c.in0, err = newPipe(receivePipeSize); err == nil {
			tn.receivePipes++
		} else {
			c.in0 = nil
		}
	}
	tn.conns[id] = c
	return c, nil
}

// ReadFrame reads the stream's next frame from r for the side's read
// loop, as wire.ReadFrame does, except that the payload of a ConnData
// frame for a connection with a pipe (UseStream's Receive) goes into the
// pipe, by splice from the stream, and is delivered here; ReadFrame then
// reads on. When r has nothing buffered the header is read from the
// stream alone: r would read ahead up to its size into the payload,
// which then had to be copied into the pipe (a quarter of a download's
// bytes with 256 KiB frames and a 64 KiB buffer).
func (tn *Tunnel) ReadFrame(r *bufio.Reader) (wire.Frame, error) {
	var raw [wire.HeaderSize]byte
	for tn.pipes {
		var h []byte
		if r.Buffered() == 0 {
			if err := readStream(tn.stream, raw[:]); err != nil {
				return wire.Frame{}, err
			}
			h = raw[:]
		} else {
			var err error
			if h, err = r.Peek(wire.HeaderSize); err != nil {
				break // wire.ReadFrame reports it
			}
		}
		// The header's layout is wire's: length, id, type.
		n, id := binary.BigEndian.Uint32(h[0:4]), binary.BigEndian.Uint32(h[4:8])
		var c *Conn
		if wire.FrameType(h[8]) == wire.FrameConnData && n > 0 && n <= windowToAgent {
			if c = tn.Get(id); c != nil && c.in0 == nil {
				c = nil
			}
		}
		if c == nil {
			// Any other frame: wire.ReadFrame decodes and checks it
			// (and Deliver judges a ConnData frame).
			if len(h) == len(raw) && &h[0] == &raw[0] {
				return wire.ReadFrame(io.MultiReader(bytes.NewReader(raw[:]), r))
			}
			break
		}
		if &h[0] != &raw[0] {
			r.Discard(wire.HeaderSize)
		}
		if err := c.receive(r, int(n)); err != nil {
			return wire.Frame{}, err
		}
	}
	return wire.ReadFrame(r)
}

// receive takes the next n bytes of r, a ConnData payload, into c's pipe
// as far as the pipe holds them, the rest into memory behind them. The
// pipe is big enough for the window (which receive enforces, as Deliver
// does), so it fills only when the bytes came in many small pieces.
func (c *Conn) receive(r *bufio.Reader, n int) error {
	c.mu.Lock()
	if c.rEOF {
		c.mu.Unlock()
		return fmt.Errorf("%w: data after end of connection %d", wire.ErrProtocol, c.id)
	}
	if c.queued+n > c.window {
		c.mu.Unlock()
		return fmt.Errorf("%w: connection %d sent past its flow-control window", wire.ErrProtocol, c.id)
	}
	piping := len(c.in) == 0 && !c.closed // bytes in memory come after the pipe's
	c.mu.Unlock()
	moved := 0
	if !piping {
		// memory only, below
	} else if pw, ok := c.in0.w.acquire(); ok {
		if k := min(n, r.Buffered()); k > 0 {
			b, _ := r.Peek(k)
			moved = pipeWrite(pw, b)
			r.Discard(moved)
		}
		if r.Buffered() == 0 && moved < n && !c.tn.noSplice.Load() {
			m, err := spliceFill(c.tn.stream, pw, n-moved)
			moved += m
			if err != nil && m == 0 && unsupported(err) {
				// A kernel or filter that refuses splice from the
				// stream: the bytes are read instead, from now on.
				c.tn.noSplice.Store(true)
			} else if err != nil {
				c.in0.w.release()
				return err
			}
		}
		c.in0.w.release()
	}
	c.mu.Lock()
	if !c.closed {
		c.queued += moved
		c.piped += moved
	}
	c.mu.Unlock()
	if moved == n {
		c.cond.Broadcast()
		return nil
	}
	b := make([]byte, n-moved)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	c.mu.Lock()
	if !c.closed {
		c.queued += len(b)
		c.in = append(c.in, b)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
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
		c, err := tn.add(f.ID, Addr("sandbox"), windowToHost, windowToAgent)
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
	if f.Type == wire.FrameConnHandoff {
		return tn.deliverHandoff(f.ID)
	}
	if f.Type == wire.FrameConnClose && tn.releaseHanded(f.ID) {
		return nil // the host is done with a connection handed to it
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
		if c.queued+len(f.Payload) > c.window {
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
	if tn.ho.stream != nil {
		tn.ho.stream.drop()
	}
	live, released, sockets := tn.ho.live, tn.ho.released, tn.ho.sockets
	tn.ho.live, tn.ho.released, tn.ho.sockets = nil, nil, nil
	tn.mu.Unlock()
	// Handed-over connections end with the stream, as carried ones do.
	if tn.ho.socket != nil {
		tn.ho.socket.Close()
	}
	for c := range sockets {
		c.Close()
	}
	for _, hc := range live {
		hc.Close()
	}
	for _, release := range released {
		release()
	}
	for _, c := range conns {
		c.mu.Lock()
		c.reset = true
		c.cond.Broadcast()
		c.mu.Unlock()
		// The pipes' bytes cannot be acked any more; their descriptors
		// go now, not when the connection's user closes it.
		c.dropPipe()
	}
	close(tn.accepted)
}

// Conn is one end of a tunnelled connection. It is a net.Conn with
// deadlines and half close (CloseWrite).
type Conn struct {
	id            uint32
	tn            *Tunnel
	local, remote net.Addr

	// window is the most incoming bytes the connection buffers; acks
	// batch a quarter of it (not one per read).
	window int

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

	// in0 is the connection's incoming pipe (UseStream's Receive; nil
	// when bytes come in memory) and piped how many bytes it holds:
	// they come before those in in. rmu serialises the readers of the
	// pipe; pipeOnce gives it back once.
	in0      *kpipe
	piped    int
	rmu      sync.Mutex
	pipeOnce sync.Once
}

// dropPipe closes the connection's incoming pipe (once its users are
// done with it) and frees its place among the tunnel's pipes.
func (c *Conn) dropPipe() {
	if c.in0 == nil {
		return
	}
	c.pipeOnce.Do(func() {
		c.in0.close()
		c.tn.mu.Lock()
		c.tn.receivePipes--
		c.tn.mu.Unlock()
	})
}

// kpipe is a kernel pipe a connection's bytes pass through (splice_*.go).
type kpipe struct{ r, w fdRef }

// fdRef is a descriptor used by one goroutine at a time and closed when
// neither that use nor the connection needs it: closing it while a splice
// runs on it would let the number be reused for another file and the
// bytes land there.
type fdRef struct {
	mu            sync.Mutex
	fd            int
	busy, closing bool
}

func (f *fdRef) acquire() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return -1, false
	}
	f.busy = true
	return f.fd, true
}

func (f *fdRef) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy = false
	if f.closing && f.fd >= 0 {
		closeFD(f.fd)
		f.fd = -1
	}
}

func (f *fdRef) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	if !f.busy && f.fd >= 0 {
		closeFD(f.fd)
		f.fd = -1
	}
}

func (p *kpipe) close() {
	if p != nil {
		p.r.close()
		p.w.close()
	}
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
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if err := c.waitIn(); err != nil {
		return 0, err
	}
	if c.piped > 0 {
		k := min(len(p), c.piped)
		c.mu.Unlock()
		return c.readPipe(p[:k])
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

// waitIn waits for bytes to read and returns with c.mu held when there
// are some; otherwise it returns why not (io.EOF after the peer's half
// close) with c.mu released.
func (c *Conn) waitIn() error {
	c.mu.Lock()
	for c.piped == 0 && len(c.in) == 0 && !c.rEOF && !c.reset && !c.closed {
		if c.rdl.passed() {
			c.mu.Unlock()
			return os.ErrDeadlineExceeded
		}
		c.cond.Wait()
	}
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	if c.piped == 0 && len(c.in) == 0 {
		reset := c.reset && !c.rEOF
		c.mu.Unlock()
		if reset {
			return ErrConnReset
		}
		return io.EOF
	}
	return nil
}

// readPipe reads into p, at most what the pipe holds (rmu held).
func (c *Conn) readPipe(p []byte) (int, error) {
	pr, ok := c.in0.r.acquire()
	if !ok {
		return 0, net.ErrClosed
	}
	n, err := pipeRead(pr, p)
	c.in0.r.release()
	if n <= 0 {
		return 0, fmt.Errorf("reading a tunnelled connection's pipe: %w", err)
	}
	c.mu.Lock()
	c.piped -= n
	c.mu.Unlock()
	c.consumed(n)
	return n, nil
}

// WriteTo writes the peer's bytes to w as they come, chunk by chunk
// without copying them first (io.Copy from a tunnelled connection uses
// it), until the peer's half close. Bytes in the connection's pipe go to
// a socket w by splice.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var dst syscall.RawConn
	if sc, ok := w.(syscall.Conn); ok && c.in0 != nil {
		dst, _ = sc.SyscallConn()
	}
	var total int64
	var buf []byte
	for {
		if err := c.waitIn(); err != nil {
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		if k := c.piped; k > 0 {
			c.mu.Unlock()
			var n int
			var err error
			if dst != nil {
				if n, err = c.splicePipe(dst, k); n == 0 && err != nil && unsupported(err) {
					dst, err = nil, nil // the socket takes no splice: copy
				}
			} else {
				if buf == nil {
					buf = make([]byte, copyChunk)
				}
				if n, err = c.readPipe(buf[:min(k, len(buf))]); err == nil {
					var m int
					m, err = w.Write(buf[:n])
					if m < n {
						// The bytes left the pipe: what w did not take
						// is kept in memory, ahead of the rest.
						c.mu.Lock()
						c.in = append([][]byte{append([]byte(nil), buf[m:n]...)}, c.in...)
						c.queued += n - m
						c.mu.Unlock()
					}
					n = m
				}
			}
			total += int64(n)
			if err != nil {
				return total, err
			}
			continue
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

// splicePipe moves k bytes from the pipe to the socket behind dst (rmu
// held).
func (c *Conn) splicePipe(dst syscall.RawConn, k int) (int, error) {
	pr, ok := c.in0.r.acquire()
	if !ok {
		return 0, net.ErrClosed
	}
	n, err := spliceTo(dst, pr, k)
	c.in0.r.release()
	c.mu.Lock()
	c.piped -= n
	c.mu.Unlock()
	c.consumed(n)
	return n, err
}

// consumed accounts for n bytes taken out of the queue and returns credit
// to the peer once enough has gathered.
func (c *Conn) consumed(n int) {
	c.mu.Lock()
	c.queued -= n
	c.unacked += n
	ack := 0
	if c.unacked >= c.window/4 {
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
		n, err := c.reserve(min(len(p), copyChunk))
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
// buffer (io.Copy to a tunnelled connection uses it). A TCP socket's
// bytes (r a *net.TCPConn, or an io.LimitedReader over one) go to the
// stream by splice where UseStream allows it.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var total int64
	if c.tn.spliceSend {
		lr, limited := r.(*io.LimitedReader)
		src := r
		limit := int64(-1)
		if limited {
			src, limit = lr.R, lr.N
		}
		if tc, ok := src.(*net.TCPConn); ok {
			spliced, handled, err := c.spliceSend(tc, limit)
			total = spliced
			if limited {
				lr.N -= spliced
			}
			if handled {
				return total, err
			}
			// Splicing stopped with nothing in flight: copy the rest.
		}
	}
	for {
		n, err := c.reserve(copyChunk)
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

// spliceSend sends src's bytes (limit of them; all when negative) by
// splice: from the socket into a pooled pipe, then a ConnData header and
// the pipe's bytes to the stream, frame by frame. handled is false when
// a pipe cannot be had or splice is unsupported, with no frame half
// sent: the caller copies the rest (total were sent).
func (c *Conn) spliceSend(src *net.TCPConn, limit int64) (total int64, handled bool, err error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var hdr [wire.HeaderSize]byte
	for limit != 0 {
		want := spliceChunk
		if limit > 0 {
			want = int(min(int64(want), limit))
		}
		n, err := c.reserve(want)
		if err != nil {
			return total, true, err
		}
		// A pipe is taken only once the socket has bytes (or its end):
		// an idle connection (a client's kept-alive tunnel) holds none.
		if err := waitReadable(rc); err != nil {
			c.unreserve(n)
			return total, true, err
		}
		m, err := c.spliceFrame(rc, &hdr, n)
		c.unreserve(n - m)
		if err != nil {
			if m == 0 && unsupported(err) {
				return total, false, nil // no pipe, or no splice: copy
			}
			return total, true, err
		}
		if m == 0 {
			return total, true, nil // the socket's end
		}
		total += int64(m)
		if limit > 0 {
			limit -= int64(m)
		}
	}
	return total, true, nil
}

// spliceFrame sends up to n bytes of the socket behind rc as one ConnData
// frame through a pooled pipe, and returns how many; 0 at the socket's
// end.
func (c *Conn) spliceFrame(rc syscall.RawConn, hdr *[wire.HeaderSize]byte, n int) (int, error) {
	p, err := getSendPipe()
	if err != nil {
		return 0, errors.ErrUnsupported // no pipe: the caller copies
	}
	// The pipe is this frame's alone; it goes back to the pool empty, or
	// is closed with what a failed splice left in it.
	empty := true
	defer func() { putSendPipe(p, empty) }()
	m, err := spliceFrom(rc, p.w.fd, n)
	if err != nil || m == 0 {
		return 0, err
	}
	empty = false
	err = c.tn.streamWrite(func(w io.Writer) error {
		if _, err := w.Write(wire.AppendHeader(hdr[:0], c.id, wire.FrameConnData, m)); err != nil {
			return err
		}
		moved, err := spliceTo(c.tn.stream, p.r.fd, m)
		if err != nil && unsupported(err) {
			// The stream takes no splice after all: the frame's bytes
			// are copied out of the pipe.
			buf := make([]byte, m-moved)
			var k int
			if k, err = io.ReadFull(pipeReader(p.r.fd), buf); err == nil {
				_, err = w.Write(buf[:k])
			}
		}
		return err
	})
	if err != nil {
		return m, fmt.Errorf("%w: %v", errStreamBroken, err)
	}
	empty = true
	return m, nil
}

// errStreamBroken wraps a failure writing a spliced frame: the stream is
// gone (not an unsupported splice the caller could copy around).
var errStreamBroken = errors.New("writing to the agent's stream")

// pipeReader reads a pipe end that holds the bytes asked for.
type pipeReader int

func (p pipeReader) Read(b []byte) (int, error) {
	n, err := pipeRead(int(p), b)
	if n <= 0 && err == nil {
		err = io.ErrUnexpectedEOF
	}
	return max(n, 0), err
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
	n := min(want, c.credit)
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
		c.wbuf = make([]byte, wire.HeaderSize+copyChunk)
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
	c.in, c.queued, c.piped = nil, 0, 0
	c.dropPipe()
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
