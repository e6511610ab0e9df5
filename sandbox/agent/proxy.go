package agent

import (
	"errors"
	"io"
	"net"
	"sync"
)

// The agent's half of egress by name. With Hello.Proxy set the agent
// listens on that address, which must be on the sandbox's own loopback
// (inside its network namespace or container, where nothing else is
// reachable), and carries every accepted connection, byte for byte, over
// its stream to the host (tunnel.go). The agent decides nothing: the HTTP
// proxy protocol, the policy and the dialling all happen on the host,
// outside the boundary, because everything on this side is under the
// control of the code the sandbox runs.

// MaxProxyConns bounds the connections the agent carries at once; further
// connections wait in the kernel's accept queue. The host's own limit
// (its policy's, answered with an HTTP error) must not be higher.
const MaxProxyConns = maxTunnelConns * 3 / 4

// proxy is the agent's listener for egress.
type proxy struct {
	l     net.Listener
	tn    *tunnel
	next  uint32
	slots chan struct{}
	wg    sync.WaitGroup
}

// listenProxy listens on addr for connections to carry over s's stream;
// start begins accepting them.
func (s *server) listenProxy(addr string) (*proxy, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &proxy{l: l, tn: newTunnel(s.send, s.write, l.Addr()), slots: make(chan struct{}, MaxProxyConns)}, nil
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
		tc, err := p.tn.add(id, c.RemoteAddr())
		if err == nil {
			err = p.tn.send(id, FrameConnOpen, nil)
		}
		if err != nil {
			c.Close()
			<-p.slots
			if tc != nil {
				p.tn.remove(id)
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
func relay(c *net.TCPConn, tc *tunnelConn) {
	done := make(chan struct{})
	go func() {
		// sandbox program -> host
		_, err := io.Copy(tc, c)
		switch {
		case err == nil:
			tc.CloseWrite()
		case errors.Is(err, errConnReset) || errors.Is(err, net.ErrClosed):
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
	p.tn.shutdown()
	p.wg.Wait()
}
