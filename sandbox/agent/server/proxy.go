package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/internal/tunnel"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// The agent's half of egress by name. With Hello.Proxy set the agent
// listens on that address, which must be on the sandbox's own loopback
// (inside its network namespace or container, where nothing else is
// reachable), and carries every accepted connection, byte for byte, over
// its stream to the host (package agent/internal/tunnel). The agent decides nothing: the HTTP
// proxy protocol, the policy and the dialling all happen on the host,
// outside the boundary, because everything on this side is under the
// control of the code the sandbox runs.

// proxy is the agent's listener for egress.
type proxy struct {
	l    net.Listener
	tn   *tunnel.Tunnel
	next uint32
	// handoff: connections' sockets are handed to the host
	// (Hello.ProxyHandoff), not carried.
	handoff bool
	slots   chan struct{}
	wg      sync.WaitGroup
}

// listenProxy listens on addr for connections to carry over s's stream;
// start begins accepting them.
func (s *server) listenProxy(addr string) (*proxy, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	tn := tunnel.New(s.send, s.write, l.Addr())
	// Where the host asked for it and the stream takes descriptors, each
	// connection's socket goes to the host, which serves it directly.
	// Otherwise a download's bytes go from the stream into each
	// connection's pipe and on to the program's socket without entering
	// the agent.
	tn.UseStream(s.conn, s.writeWith, tunnel.Splicing{Receive: true, HandOff: s.hello.ProxyHandoff})
	if !tn.HandsOff() && s.hello.ProxyHandoffPath != "" {
		// A stream that carries no descriptors (a container's attach
		// stream): the backend's handoff socket does. Without it the
		// connections are carried.
		if c, err := net.Dial("unix", s.hello.ProxyHandoffPath); err == nil {
			tn.UseHandoffSocket(c.(*net.UnixConn))
		} else {
			s.logf("egress: cannot reach the handoff socket %s, carrying connections over the stream: %v", s.hello.ProxyHandoffPath, err)
		}
	}
	return &proxy{l: l, tn: tn, handoff: tn.HandsOff(), slots: make(chan struct{}, wire.MaxProxyConns)}, nil
}

// readFrame reads the stream's next frame for the read loop; with the
// egress proxy on, the tunnel takes its connections' bytes on the way
// (tunnel.ReadFrame).
func (s *server) readFrame(r *bufio.Reader) (wire.Frame, error) {
	if s.proxy != nil {
		return s.proxy.tn.ReadFrame(r)
	}
	return wire.ReadFrame(r)
}

// writeWith runs fn with the stream's write lock held, for a frame the
// tunnel writes in parts; a failure may leave half a frame, so it ends
// the stream.
func (s *server) writeWith(fn func(io.Writer) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.dead {
		return io.ErrClosedPipe
	}
	if err := fn(s.conn); err != nil {
		s.dead = true
		s.conn.Close()
		return err
	}
	return nil
}

func (p *proxy) start() {
	p.wg.Add(1)
	go p.acceptLoop()
}

func (p *proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		p.slots <- struct{}{}
		c, err := p.l.Accept()
		if err != nil {
			<-p.slots
			return
		}
		p.next++
		id := p.next
		if p.handoff {
			// The host takes the socket; the slot is freed when it
			// says it is done (or the stream ends).
			if p.tn.HandOff(id, c.(*net.TCPConn), func() { <-p.slots }) {
				c.Close()
				continue
			}
		}
		tc, err := p.tn.Add(id, c.RemoteAddr())
		if err == nil {
			err = p.tn.Send(id, wire.FrameConnOpen, nil)
		}
		if err != nil {
			c.Close()
			<-p.slots
			if tc != nil {
				p.tn.Remove(id)
			}
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.slots }()
			relay(c.(*net.TCPConn), tc)
		}()
	}
}

// relay copies both ways until both directions ended, passing half
// closes on, then closes both ends.
func relay(c *net.TCPConn, tc *tunnel.Conn) {
	done := make(chan struct{})
	go func() {
		// sandbox program -> host
		_, err := io.Copy(tc, c)
		switch {
		case err == nil:
			tc.CloseWrite()
		case errors.Is(err, tunnel.ErrConnReset) || errors.Is(err, net.ErrClosed):
			// The host stopped reading (it refused the request, say),
			// maybe with its answer still queued here: leave tc to the
			// other direction, which delivers that answer first. Closing
			// tc here lost 403 answers on a busy machine.
		default:
			// The program's side failed: the host stops too.
			tc.Close()
		}
		close(done)
	}()
	// host -> sandbox program
	if _, err := io.Copy(c, tc); err == nil {
		c.CloseWrite()
	} else {
		// The host dropped the connection (refused, limit reached, dial
		// failed): drop the program's connection too, and unblock the
		// other copy.
		c.Close()
		tc.Close()
	}
	<-done
	c.Close()
	tc.Close()
}

// close stops accepting and drops every carried connection.
func (p *proxy) close() {
	p.l.Close()
	p.tn.Shutdown()
	p.wg.Wait()
}
