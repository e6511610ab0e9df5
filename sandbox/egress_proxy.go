package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The host half of egress by name (see egress.go): an HTTP proxy served on
// the connections the agent carries out of the sandbox.

const (
	// egressHeaderTimeout bounds how long a connection may take to send
	// its proxy request (and a tunnel its TLS client hello), so a program
	// cannot hold connection slots by sending nothing.
	egressHeaderTimeout = 30 * time.Second
	// egressResolveTimeout and egressDialTimeout bound the host's DNS
	// lookup and TCP connect for one connection.
	egressResolveTimeout = 10 * time.Second
	egressDialTimeout    = 10 * time.Second
	// egressMaxAddrs is how many of a name's allowed addresses are tried.
	egressMaxAddrs = 4
)

// egressEvent is the audit record of one connection through the proxy.
type egressEvent struct {
	method   string // CONNECT, GET, ... ("" when the request was unreadable)
	host     string
	port     int
	allowed  bool
	reason   string // why it was denied or failed ("" when it completed)
	addr     string // the address dialled
	bytesOut int64  // sandbox -> destination
	bytesIn  int64  // destination -> sandbox
	duration time.Duration
}

// egressProxy serves the proxy protocol on tunnelled connections.
type egressProxy struct {
	policy *compiledPolicy
	audit  func(egressEvent)
	// dialer dials checked addresses (a net.Dialer; tests record instead).
	dialer interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	}

	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}
	bytes  atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	l      net.Listener
}

func newEgressProxy(cp *compiledPolicy, audit func(egressEvent)) *egressProxy {
	ctx, cancel := context.WithCancel(context.Background())
	return &egressProxy{policy: cp, audit: audit, ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, cp.maxConns), conns: map[net.Conn]struct{}{},
		dialer: &net.Dialer{Timeout: egressDialTimeout}}
}

// serve accepts connections from l until it fails (the sandbox closed).
func (p *egressProxy) serve(l net.Listener) {
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

// track registers a connection for close; false once closed.
func (p *egressProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *egressProxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// close drops every connection and waits for the handlers to end.
func (p *egressProxy) close() {
	p.mu.Lock()
	p.closed = true
	if p.l != nil {
		p.l.Close()
	}
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.cancel()
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// handle serves one connection: one CONNECT tunnel, or one plain HTTP
// request and its response.
func (p *egressProxy) handle(c net.Conn) {
	start := time.Now()
	ev := egressEvent{}
	defer func() {
		ev.duration = time.Since(start)
		p.audit(ev)
	}()
	br := bufio.NewReaderSize(c, 16<<10)
	c.SetReadDeadline(start.Add(egressHeaderTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		ev.reason = "unreadable proxy request: " + err.Error()
		refuse(c, http.StatusBadRequest, "not an HTTP proxy request", "sandboxkit's egress proxy speaks HTTP proxy requests (CONNECT host:port, or GET http://host/...); "+ev.reason)
		return
	}
	c.SetReadDeadline(time.Time{})
	ev.method = req.Method
	host, port, err := proxyTarget(req)
	ev.host, ev.port = host, port
	if err != nil {
		ev.reason = err.Error()
		refuse(c, http.StatusBadRequest, "bad proxy request", ev.reason)
		return
	}
	var release func()
	select {
	case p.slots <- struct{}{}:
		release = sync.OnceFunc(func() { <-p.slots })
		defer release()
	default:
		ev.reason = fmt.Sprintf("connection limit: %d egress connections are open, the sandbox's limit (EgressPolicy.MaxConns)", p.policy.maxConns)
		refuse(c, http.StatusTooManyRequests, "too many egress connections", ev.reason+"; close some or retry later")
		return
	}
	if used := p.bytes.Load(); used >= p.policy.maxBytes {
		ev.reason = fmt.Sprintf("byte limit: the sandbox's egress carried %d bytes, its limit (EgressPolicy.MaxBytes)", used)
		refuse(c, http.StatusTooManyRequests, "egress byte limit reached", ev.reason)
		return
	}
	addrs, deny := p.decide(host, port)
	if deny != "" {
		ev.reason = deny
		refuse(c, http.StatusForbidden, "Forbidden by the sandbox's egress policy",
			fmt.Sprintf("sandboxkit egress proxy: connection to %s denied: %s.\nTo allow it, the user who runs this sandbox adds the host to its egress allowlist (sandboxkit --allow-domain %s, or an EgressRule in sandbox.WithEgress).", net.JoinHostPort(host, strconv.Itoa(port)), deny, host))
		return
	}
	if req.Method == http.MethodConnect {
		p.tunnel(c, br, host, port, addrs, &ev)
		return
	}
	p.forward(c, br, req, port, addrs, &ev, release)
}

// proxyTarget returns the host and port a proxy request is for: the
// CONNECT target, or the absolute URL of a plain HTTP request (whose host
// is also what the request's Host header is rewritten to).
func proxyTarget(req *http.Request) (string, int, error) {
	var hostport string
	if req.Method == http.MethodConnect {
		hostport = req.RequestURI
	} else {
		if req.URL == nil || !req.URL.IsAbs() || req.URL.Host == "" {
			return "", 0, fmt.Errorf("request for %q is not in proxy form (http://host/path): this is sandboxkit's egress proxy, use it through HTTP_PROXY", req.RequestURI)
		}
		if req.URL.Scheme != "http" {
			return req.URL.Hostname(), 0, fmt.Errorf("scheme %q through a plain proxy request: use CONNECT (https through HTTPS_PROXY)", req.URL.Scheme)
		}
		hostport = req.URL.Host
		if req.URL.Port() == "" {
			hostport = net.JoinHostPort(req.URL.Hostname(), "80")
		}
	}
	h, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("target %q is not host:port", hostport)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return h, 0, fmt.Errorf("target %q has no valid port", hostport)
	}
	return strings.ToLower(strings.TrimSuffix(h, ".")), port, nil
}

// decide applies the policy to host:port. It returns the addresses that
// may be dialled, or why none may. A name not on the list is refused
// before any lookup; every address of an allowed name is checked against
// the refused ranges, and only checked addresses are dialled (so a DNS
// answer that changes between check and use cannot redirect the dial).
func (p *egressProxy) decide(host string, port int) ([]netip.Addr, string) {
	cp := p.policy
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return nil, "addresses with a zone are refused"
		}
		a = a.Unmap()
		if _, ok := cp.matchAddr(a, port); !ok {
			return nil, fmt.Sprintf("IP address targets are refused unless the policy names the address (%s is not on the allowlist); use the host's name", a)
		}
		return []netip.Addr{a}, ""
	}
	if !validName(host) {
		return nil, fmt.Sprintf("%q is not a valid host name", host)
	}
	r, ok := cp.matchName(host, port)
	if !ok {
		if cp.namesHost(host) {
			return nil, fmt.Sprintf("port %d of %s is not on the allowlist", port, host)
		}
		return nil, fmt.Sprintf("%s is not on the allowlist", host)
	}
	ctx, cancel := context.WithTimeout(p.ctx, egressResolveTimeout)
	defer cancel()
	found, err := cp.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Sprintf("%s does not resolve: %v", host, err)
	}
	var addrs []netip.Addr
	var refused []string
	for _, a := range found {
		a = a.Unmap().WithZone("")
		if what := specialRange(a); what != "" && !r.internal {
			if _, named := cp.matchAddr(a, port); !named {
				refused = append(refused, a.String()+" ("+what+")")
				continue
			}
		}
		if len(addrs) < egressMaxAddrs {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		if len(refused) == 0 {
			return nil, fmt.Sprintf("%s resolves to no address", host)
		}
		return nil, fmt.Sprintf("%s resolves only to refused addresses: %s (allowed only for a rule marked internal)", host, strings.Join(refused, ", "))
	}
	return addrs, ""
}

// dial connects to the first reachable address.
func (p *egressProxy) dial(addrs []netip.Addr, port int) (net.Conn, string, error) {
	var err error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(port)).String()
		var c net.Conn
		if c, err = p.dialer.DialContext(p.ctx, "tcp", ap); err == nil {
			if !p.track(c) {
				c.Close()
				return nil, ap, net.ErrClosed
			}
			return c, ap, nil
		}
	}
	return nil, "", err
}

// tunnel serves an allowed CONNECT: the client's first bytes must be a TLS
// client hello naming the CONNECT host (SNI), or the tunnel is closed
// before the destination is dialled; then bytes flow both ways.
func (p *egressProxy) tunnel(c net.Conn, br *bufio.Reader, host string, port int, addrs []netip.Addr, ev *egressEvent) {
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		ev.reason = "the sandbox closed the connection"
		return
	}
	c.SetReadDeadline(time.Now().Add(egressHeaderTimeout))
	sni, hello, err := readClientHello(br)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		ev.reason = err.Error()
		return
	}
	sni = strings.ToLower(strings.TrimSuffix(sni, "."))
	if _, isAddr := netip.ParseAddr(host); !(sni == host || (isAddr == nil && sni == "")) {
		// Domain fronting: the TLS session would be for another host than
		// the one the policy checked (a CDN serves both).
		ev.reason = fmt.Sprintf("TLS server name (SNI) %q differs from the CONNECT host %q", sni, host)
		return
	}
	up, addr, err := p.dial(addrs, port)
	if err != nil {
		ev.allowed, ev.reason = true, "dial failed: "+err.Error()
		return
	}
	defer p.untrack(up)
	ev.allowed, ev.addr = true, addr
	cu := &countedConn{Conn: up, p: p, ev: ev}
	if _, err := cu.Write(hello); err != nil {
		ev.reason = err.Error()
		return
	}
	p.relay(c, br, cu, ev)
}

// relay copies client<->upstream until both directions end, passing half
// closes on.
func (p *egressProxy) relay(c net.Conn, br *bufio.Reader, up *countedConn, ev *egressEvent) {
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(up, br)
		if err == nil {
			closeWrite(up.Conn)
		} else {
			up.Close()
			c.Close()
		}
		errc <- err
	}()
	_, err := io.Copy(c, up)
	if err == nil {
		closeWrite(c)
	} else {
		c.Close()
		up.Close()
	}
	err2 := <-errc
	for _, e := range []error{err, err2} {
		if errors.Is(e, errEgressBytes) && ev.reason == "" {
			ev.reason = fmt.Sprintf("byte limit: the sandbox's egress reached its limit of %d bytes (EgressPolicy.MaxBytes); the connection was cut", p.policy.maxBytes)
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// forward serves one allowed plain HTTP request: sent to the destination
// in origin form with its Host set to the checked host, the response sent
// back, the connection closed after it.
//
// release frees the connection's slot. It runs before the program sees
// the response end: a client that sends its next request as soon as one
// ends (curl run twice) found the slot still held and got 429 on a busy
// machine.
func (p *egressProxy) forward(c net.Conn, br *bufio.Reader, req *http.Request, port int, addrs []netip.Addr, ev *egressEvent, release func()) {
	up, addr, err := p.dial(addrs, port)
	if err != nil {
		ev.allowed, ev.reason = true, "dial failed: "+err.Error()
		refuse(c, http.StatusBadGateway, "destination unreachable", fmt.Sprintf("sandboxkit egress proxy: %s is allowed but could not be reached: %v", req.URL.Host, err))
		return
	}
	defer p.untrack(up)
	ev.allowed, ev.addr = true, addr
	cu := &countedConn{Conn: up, p: p, ev: ev}
	// Hop-by-hop headers are for the proxy, not the destination.
	dropHopHeaders(req.Header)
	if req.Header.Get("Expect") != "" {
		// Answer the client's wait for 100-continue here: the body is
		// copied as the request is written.
		req.Header.Del("Expect")
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	req.Host = req.URL.Host
	req.Close = true
	if err := req.Write(cu); err != nil {
		ev.reason = "sending the request: " + err.Error()
		return
	}
	ur := bufio.NewReader(cu)
	resp, err := http.ReadResponse(ur, req)
	if err != nil {
		ev.reason = "reading the response: " + err.Error()
		refuse(c, http.StatusBadGateway, "bad response", "sandboxkit egress proxy: the destination's response was unreadable: "+err.Error())
		return
	}
	// The body is closed with the destination's connection down first: a
	// close that drained the rest of an unsent body would wait on the
	// destination.
	defer func() { up.Close(); resp.Body.Close() }()
	resp.Close = true
	if rawBody(req, resp) {
		err = p.relayResponse(c, ur, resp, cu)
	} else {
		err = resp.Write(c)
	}
	if err != nil && ev.reason == "" {
		ev.reason = "sending the response: " + err.Error()
		if errors.Is(err, errEgressBytes) {
			ev.reason = fmt.Sprintf("byte limit: the sandbox's egress reached its limit of %d bytes (EgressPolicy.MaxBytes); the response was cut", p.policy.maxBytes)
		}
	}
	up.Close()
	release()
	closeWrite(c)
}

// rawBody reports whether resp's body can go to the client as the
// destination sent it: a body of known length, or one that ends with the
// connection. Chunked bodies, and responses without a body (to HEAD, 1xx,
// 204, 304), go through net/http, which re-frames them.
func rawBody(req *http.Request, resp *http.Response) bool {
	return req.Method != http.MethodHead && resp.StatusCode >= 200 && resp.StatusCode != http.StatusNoContent &&
		resp.StatusCode != http.StatusNotModified && len(resp.TransferEncoding) == 0
}

// hopHeaders are the hop-by-hop headers (RFC 9110, section 7.6.1): they
// are for the proxy, never passed on.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// dropHopHeaders removes the hop-by-hop headers and those the Connection
// header names.
func dropHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// relayResponse sends resp to the client with its body copied as raw
// bytes from the destination's connection, not through net/http's body
// reader and writer: the header goes first (with Connection: close, as
// the proxy serves one request per connection), then the body bytes ur
// already read, then the rest straight from the connection, which the
// tunnel splices into the agent's stream where the kernel allows it.
// Measured on a busy 2-core machine (BenchmarkEgressDownload), a 10 MB
// plain HTTP download took the host proxy ~7 ms of CPU through net/http's
// copy.
func (p *egressProxy) relayResponse(c net.Conn, ur *bufio.Reader, resp *http.Response, up *countedConn) error {
	h := resp.Header.Clone()
	dropHopHeaders(h)
	h.Del("Content-Length")
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	h.Set("Connection", "close")
	text := strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)))
	if text == "" {
		text = http.StatusText(resp.StatusCode)
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/%d.%d %03d %s\r\n", resp.ProtoMajor, resp.ProtoMinor, resp.StatusCode, text)
	h.Write(&head) // drops invalid names, turns line breaks in values into spaces
	head.WriteString("\r\n")
	n := int64(ur.Buffered())
	if resp.ContentLength >= 0 {
		n = min(n, resp.ContentLength)
	}
	buffered, _ := ur.Peek(int(n))
	head.Write(buffered)
	if _, err := c.Write(head.Bytes()); err != nil {
		return err
	}
	rest := int64(-1)
	if resp.ContentLength >= 0 {
		rest = resp.ContentLength - n
		if rest == 0 {
			return nil
		}
	}
	m, err := up.writeTo(c, rest)
	if err == nil && rest >= 0 && m < rest {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// refuse answers with an error status and a plain-text body a person or
// model can act on; the status text carries the gist, since many clients
// (pip, curl's CONNECT) show only the status line.
func refuse(c net.Conn, status int, text, body string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Sandboxkit-Egress: denied\r\n\r\n%s\n",
		status, text, len(body)+1, body)
	closeWrite(c)
}

// errEgressBytes ends a connection that passed the byte limit.
var errEgressBytes = errors.New("the sandbox's egress byte limit was reached")

// countedConn counts an upstream connection's bytes into its event and
// the proxy's total, failing once the total passes the limit.
type countedConn struct {
	net.Conn
	p  *egressProxy
	ev *egressEvent
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	atomic.AddInt64(&c.ev.bytesIn, int64(n))
	if c.p.bytes.Add(int64(n)) > c.p.policy.maxBytes {
		return n, errEgressBytes
	}
	return n, err
}

// egressCopyChunk is how much one step of a counted copy moves: the byte
// limit is checked between steps.
const egressCopyChunk = 1 << 20

// WriteTo copies the destination's bytes to w until the destination ends
// (io.Copy uses it for the CONNECT tunnel's download direction).
func (c *countedConn) WriteTo(w io.Writer) (int64, error) { return c.writeTo(w, -1) }

// writeTo copies n bytes (all, when n < 0) from the destination's
// connection to w, counting them. Each step hands w a LimitedReader over
// the connection itself, so a tunnelled connection's ReadFrom can splice
// the bytes without copying them through the proxy; the byte limit is
// checked between steps, and a step takes at most one byte past what is
// left of it.
func (c *countedConn) writeTo(w io.Writer, n int64) (int64, error) {
	var total int64
	for n < 0 || total < n {
		step := int64(egressCopyChunk)
		if n >= 0 {
			step = min(step, n-total)
		}
		step = min(step, max(c.p.policy.maxBytes-c.p.bytes.Load(), 0)+1)
		m, err := io.Copy(w, &io.LimitedReader{R: c.Conn, N: step})
		total += m
		atomic.AddInt64(&c.ev.bytesIn, m)
		if c.p.bytes.Add(m) > c.p.policy.maxBytes {
			return total, errEgressBytes
		}
		if err != nil || m < step {
			return total, err // m < step: the destination ended
		}
	}
	return total, nil
}

func (c *countedConn) Write(b []byte) (int, error) {
	if c.p.bytes.Add(int64(len(b))) > c.p.policy.maxBytes {
		return 0, errEgressBytes
	}
	n, err := c.Conn.Write(b)
	atomic.AddInt64(&c.ev.bytesOut, int64(n))
	return n, err
}

// readClientHello reads the TLS client hello at the start of a tunnel and
// returns its server name and every byte it consumed (to be replayed to
// the destination). The parsing is crypto/tls's own: a server handshake
// that stops as soon as the hello is read.
func readClientHello(br *bufio.Reader) (string, []byte, error) {
	first, err := br.Peek(1)
	if err != nil {
		return "", nil, fmt.Errorf("the tunnel closed before sending anything")
	}
	if first[0] != 0x16 { // TLS handshake record
		return "", nil, fmt.Errorf("the tunnel does not start with a TLS client hello (only TLS may pass a CONNECT tunnel, so that its server name can be checked)")
	}
	var rec bytes.Buffer
	var sni string
	seen, ech := false, false
	hc := &helloConn{r: io.TeeReader(br, &rec)}
	err = tls.Server(hc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, seen = h.ServerName, true
		ech = slices.Contains(h.Extensions, extEncryptedClientHello)
		return nil, errHelloRead
	}}).Handshake()
	if !seen {
		return "", nil, fmt.Errorf("the tunnel's TLS client hello is unreadable: %v", err)
	}
	if ech {
		// With Encrypted Client Hello the server name checked here is
		// only the outer, public one; the real one is encrypted for the
		// destination (a CDN would route to any of its sites). Browsers
		// send a placeholder ECH extension by default (Chrome's GREASE);
		// they need it off to pass.
		return "", nil, fmt.Errorf("the TLS client hello uses Encrypted Client Hello, which hides the real server name from the check (turn ECH off in the client)")
	}
	return sni, rec.Bytes(), nil
}

var errHelloRead = errors.New("client hello read")

// extEncryptedClientHello is the TLS extension of Encrypted Client Hello
// (RFC 9849).
const extEncryptedClientHello = 0xfe0d

// helloConn feeds a TLS server handshake from a reader and discards what
// it writes (the alert sent when the handshake is stopped).
type helloConn struct{ r io.Reader }

func (h *helloConn) Read(b []byte) (int, error)       { return h.r.Read(b) }
func (h *helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (h *helloConn) Close() error                     { return nil }
func (h *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (h *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (h *helloConn) SetDeadline(time.Time) error      { return nil }
func (h *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (h *helloConn) SetWriteDeadline(time.Time) error { return nil }
