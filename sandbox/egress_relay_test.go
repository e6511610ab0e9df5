package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxyAgainst serves an egress proxy on a loopback listener, allowing
// up.test (resolved to 127.0.0.1) with internal addresses, and an upstream
// that answers every connection with answer's bytes, then waits for the
// proxy to close (or closes itself when hangUp). It returns the proxy's
// address, the audit events (complete after the proxy closed) and the
// proxy.
func proxyAgainst(t *testing.T, answer string, hangUp bool, maxBytes int64) (string, int, func() []egressEvent) {
	t.Helper()
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if _, err := http.ReadRequest(r); err != nil {
					return
				}
				io.WriteString(c, answer)
				if !hangUp {
					io.Copy(io.Discard, c) // until the proxy closes
				}
			}()
		}
	}()
	cp, err := compilePolicy(EgressPolicy{Resolver: &mapResolver{table: map[string][]string{"up.test": {"127.0.0.1"}}},
		Allow: []EgressRule{{Host: "up.test", Internal: true}}, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []egressEvent
	p := newEgressProxy(cp, func(e egressEvent) { mu.Lock(); events = append(events, e); mu.Unlock() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.serve(l)
	t.Cleanup(p.close)
	return l.Addr().String(), up.Addr().(*net.TCPAddr).Port, func() []egressEvent {
		p.close()
		mu.Lock()
		defer mu.Unlock()
		return events
	}
}

// fetchThrough sends one plain proxy request and returns every byte the
// proxy answered until it closed the connection.
func fetchThrough(t *testing.T, proxy string, method string, port int) []byte {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "%s http://up.test:%d/file HTTP/1.1\r\nHost: up.test:%d\r\nConnection: keep-alive\r\n\r\n", method, port, port)
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the proxy's answer (it must close the connection after one response): %v", err)
	}
	return out
}

// TestEgressForwardResponses: a plain HTTP response reaches the program in
// the sandbox intact whatever its framing (a length, the connection's
// end, chunks, none for HEAD or 204), without the destination's
// hop-by-hop headers, marked Connection: close, and the proxy closes the
// connection after it even when the destination keeps its own open.
func TestEgressForwardResponses(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 200<<10/16) // more than one copy step's buffers
	for _, tc := range []struct {
		name, method, answer string
		hangUp               bool
		body                 string
	}{
		{"length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: secret\r\nX-Kept: yes\r\n\r\n" + big, false, big},
		{"to the end", "GET", "HTTP/1.0 200 OK\r\nX-Kept: yes\r\n\r\n" + big, true, big},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Kept: yes\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", false, "hello world"},
		{"head", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nX-Kept: yes\r\n\r\n", false, ""},
		{"no content", "GET", "HTTP/1.1 204 No Content\r\nX-Kept: yes\r\n\r\n", false, ""},
		{"empty", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Kept: yes\r\n\r\n", false, ""},
		{"odd reason", "GET", "HTTP/1.1 201 Made It\r\nContent-Length: 2\r\nX-Kept: yes\r\n\r\nok", false, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, port, events := proxyAgainst(t, tc.answer, tc.hangUp, 0)
			raw := fetchThrough(t, proxy, tc.method, port)
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), &http.Request{Method: tc.method})
			if err != nil {
				t.Fatalf("the answer is not an HTTP response: %v\n%q", err, raw)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != tc.body {
				t.Fatalf("body: %d bytes (%v), want %d bytes\n%.300q", len(body), err, len(tc.body), raw)
			}
			if resp.Header.Get("X-Kept") != "yes" || resp.Header.Get("X-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || !resp.Close {
				t.Errorf("headers %v: want X-Kept, no hop-by-hop headers, Connection: close", resp.Header)
			}
			if tc.name == "odd reason" && resp.Status != "201 Made It" {
				t.Errorf("status %q, want the destination's", resp.Status)
			}
			ev := events()
			if len(ev) != 1 || !ev[0].allowed || ev[0].reason != "" || ev[0].bytesIn < int64(len(tc.body)) {
				t.Errorf("audit events %+v, want one allowed event counting the body", ev)
			}
		})
	}
}

// TestEgressForwardCut: a body shorter than its declared length ends the
// program's connection early (so the program sees the truncation), and
// the byte limit cuts a download passing it; both are in the audit
// event's reason.
func TestEgressForwardCut(t *testing.T) {
	proxy, port, events := proxyAgainst(t, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly fifty bytes.................................", true, 0)
	raw := fetchThrough(t, proxy, "GET", port)
	if !bytes.HasSuffix(raw, []byte("only fifty bytes.................................")) {
		t.Errorf("answer %q, want the bytes the destination sent", raw)
	}
	if ev := events(); len(ev) != 1 || !strings.Contains(ev[0].reason, "unexpected EOF") {
		t.Errorf("audit events %+v, want the truncation as the reason", ev)
	}

	big := strings.Repeat("x", 4<<20)
	proxy, port, events = proxyAgainst(t, "HTTP/1.1 200 OK\r\nContent-Length: "+fmt.Sprint(len(big))+"\r\n\r\n"+big, false, 1<<20)
	raw = fetchThrough(t, proxy, "GET", port)
	if len(raw) > 1<<20+64<<10 || len(raw) < 1<<20-64<<10 {
		t.Errorf("%d bytes passed a 1 MiB byte limit", len(raw))
	}
	if ev := events(); len(ev) != 1 || !strings.Contains(ev[0].reason, "byte limit") {
		t.Errorf("audit events %+v, want the byte limit as the reason", ev)
	}
}
