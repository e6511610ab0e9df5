package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
)

// recordingDialer records what the proxy dials and dials nothing.
type recordingDialer struct {
	mu     sync.Mutex
	dialed []string
}

func (d *recordingDialer) DialContext(_ context.Context, _, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	d.mu.Unlock()
	return nil, errors.New("recorded, not dialled")
}

// FuzzEgressProxyRequest feeds arbitrary bytes to the proxy as a program
// in the sandbox would, and checks that nothing but an allowed address
// and port is ever dialled, whatever the request looks like (request
// line, Host headers, IP spellings, TLS hellos, garbage).
func FuzzEgressProxyRequest(f *testing.F) {
	for _, seed := range []string{
		"CONNECT pkgs.test:443 HTTP/1.1\r\nHost: pkgs.test:443\r\n\r\n",
		"CONNECT blocked.test:443 HTTP/1.1\r\n\r\n",
		"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n",
		"CONNECT [::ffff:127.0.0.1]:80 HTTP/1.1\r\n\r\n",
		"CONNECT PKGS.TEST.:443 HTTP/1.1\r\n\r\n",
		"GET http://pkgs.test/x HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"GET http://pkgs.test:8080@evil.test/ HTTP/1.1\r\n\r\n",
		"GET http://evil.test#@pkgs.test/ HTTP/1.1\r\n\r\n",
		"GET http://2130706433/ HTTP/1.1\r\n\r\n",
		"GET http://0x7f.1/ HTTP/1.1\r\n\r\n",
		"GET /relative HTTP/1.1\r\nHost: pkgs.test\r\n\r\n",
		"GET https://pkgs.test/ HTTP/1.1\r\n\r\n",
		"CONNECT pkgs.test:443 HTTP/1.1\r\n\r\n" + string(clientHello("pkgs.test", false)),
		"CONNECT pkgs.test:443 HTTP/1.1\r\n\r\n" + string(clientHello("evil.test", false)),
		"\x16\x03\x01\x00\x05hello",
	} {
		f.Add([]byte(seed))
	}
	res := &mapResolver{table: map[string][]string{"pkgs.test": {"203.0.113.10"}, "evil.test": {"198.51.100.66"}}}
	cp, err := compilePolicy(EgressPolicy{Resolver: res, Allow: []EgressRule{{Host: "pkgs.test", Ports: []int{80, 443}}}})
	if err != nil {
		f.Fatal(err)
	}
	allowed := map[string]bool{"203.0.113.10:80": true, "203.0.113.10:443": true}
	f.Fuzz(func(t *testing.T, in []byte) {
		d := &recordingDialer{}
		p := newEgressProxy(cp, func(egressEvent) {})
		p.dialer = d
		defer p.close()
		sbx, host := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.handle(host)
			host.Close()
		}()
		go io.Copy(io.Discard, sbx)
		// The pipe's Write returns once the proxy has read everything
		// (or given up); closing then ends its wait for more.
		sbx.Write(in)
		sbx.Close()
		<-done
		for _, a := range d.dialed {
			if !allowed[a] {
				t.Fatalf("the proxy dialled %s for %q", a, in)
			}
			if _, err := netip.ParseAddrPort(a); err != nil {
				t.Fatalf("the proxy dialled %q, not a checked address", a)
			}
		}
	})
}
