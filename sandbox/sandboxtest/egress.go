package sandboxtest

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// EgressHost is what the egress tests reach: HTTPS and HTTP servers on the
// host's 127.0.0.1, a test CA for them, and a resolver that knows a few
// test names and nothing else (no query ever leaves the machine).
//
//   - pkgs.test resolves to 127.0.0.1 and is allowed with internal
//     addresses (the servers are on loopback);
//   - private.test resolves to 127.0.0.1 and is allowed, but not as
//     internal: a name on the list pointing into a refused range;
//   - blocked.test resolves to 127.0.0.1 and is not on the list.
type EgressHost struct {
	// TLSPort and HTTPPort are the servers' ports on 127.0.0.1; both serve
	// the same paths (/hello, /simple/tinypkg/, the wheel, /big).
	TLSPort, HTTPPort int
	// CAPEM is the test CA that signed the HTTPS server's certificate.
	CAPEM []byte
	// Resolver resolves the test names; Lookups lists the names asked.
	Resolver *TestResolver
	// BigSize is the size of /big.
	BigSize int

	tlsConns, httpConns atomic.Int64
}

// Egress names used by the tests.
const (
	EgressAllowed = "pkgs.test"
	egressPrivate = "private.test"
	egressBlocked = "blocked.test"
	egressHello   = "hello from pkgs.test"
)

// EgressPolicy is the policy the egress tests give their sandboxes.
func (h *EgressHost) EgressPolicy() sandbox.EgressPolicy {
	return sandbox.EgressPolicy{
		Allow: []sandbox.EgressRule{
			{Host: EgressAllowed, Internal: true},
			{Host: egressPrivate},
		},
		Resolver: h.Resolver,
	}
}

// Conns returns how many connections the two servers have accepted.
func (h *EgressHost) Conns() int64 { return h.tlsConns.Load() + h.httpConns.Load() }

// TestResolver is a Resolver over a fixed table that records every name
// it is asked about.
type TestResolver struct {
	mu    sync.Mutex
	table map[string][]netip.Addr
	asked []string
}

// LookupNetIP resolves host from the table.
func (r *TestResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Asked reports whether host was looked up.
func (r *TestResolver) Asked(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.asked, host)
}

// countListener counts accepted connections.
type countListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// NewEgressHost starts the servers; they stop when t ends.
func NewEgressHost(t testing.TB) *EgressHost {
	t.Helper()
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	h := &EgressHost{BigSize: 10 << 20, Resolver: &TestResolver{table: map[string][]netip.Addr{
		EgressAllowed: loop, egressPrivate: loop, egressBlocked: loop,
	}}}
	caPEM, cert := testCerts(t, EgressAllowed, egressPrivate, egressBlocked, "other.test")
	h.CAPEM = caPEM
	wheel, wheelName := testWheel(t)
	sum := sha256.Sum256(wheel)
	big := bytes.Repeat([]byte("0123456789abcdef"), h.BigSize/16)
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, egressHello) })
	mux.HandleFunc("/simple/tinypkg/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n", wheelName, hex.EncodeToString(sum[:]), wheelName)
	})
	mux.HandleFunc("/files/"+wheelName, func(w http.ResponseWriter, r *http.Request) { w.Write(wheel) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		w.Write(big)
	})
	serve := func(n *atomic.Int64, cfg *tls.Config) int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second, ErrorLog: nil}
		var ln net.Listener = countListener{l, n}
		if cfg != nil {
			ln = tls.NewListener(ln, cfg)
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return l.Addr().(*net.TCPAddr).Port
	}
	h.TLSPort = serve(&h.tlsConns, &tls.Config{Certificates: []tls.Certificate{cert}})
	h.HTTPPort = serve(&h.httpConns, nil)
	return h
}

// testCerts makes a CA and a server certificate it signs for names.
func testCerts(t testing.TB, names ...string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandboxkit egress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// testWheel builds a minimal pure-Python wheel (a zip with the package,
// METADATA, WHEEL and a RECORD of hashes) for package tinypkg.
func testWheel(t testing.TB) ([]byte, string) {
	t.Helper()
	files := []struct{ name, body string }{
		{"tinypkg/__init__.py", "MSG = 'tinypkg installed through the egress proxy'\n"},
		{"tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n"},
		{"tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sandboxkit-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("tinypkg-1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create("tinypkg-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), "tinypkg-1.0-py3-none-any.whl"
}

// AuditLog is a slog.Handler that keeps the records of egress events.
type AuditLog struct {
	mu     sync.Mutex
	events []map[string]string
}

// Enabled implements slog.Handler.
func (a *AuditLog) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps a record's attributes when it is an egress event.
func (a *AuditLog) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{}
	r.Attrs(func(at slog.Attr) bool { m[at.Key] = at.Value.String(); return true })
	if m["op"] != "Egress" {
		return nil
	}
	a.mu.Lock()
	a.events = append(a.events, m)
	a.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler.
func (a *AuditLog) WithAttrs([]slog.Attr) slog.Handler { return a }

// WithGroup implements slog.Handler.
func (a *AuditLog) WithGroup(string) slog.Handler { return a }

// Events returns the egress events so far (attribute name -> value).
func (a *AuditLog) Events() []map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

// find returns the first event for host with the outcome and a reason
// containing reason, waiting a little: an event is written when its
// connection ends, which may be just after the client inside finished.
func (a *AuditLog) find(host, outcome, reason string) map[string]string {
	for i := 0; i < 100; i++ {
		for _, e := range a.Events() {
			if e["host"] == host && e["outcome"] == outcome && strings.Contains(e["reason"], reason) {
				return e
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// RunEgress checks egress by name (sandbox.WithEgress) on the sandboxes
// newSandbox creates, with real clients inside: denied attempts (a name
// not on the list, IP literals, a listed name resolving into a refused
// range, a TLS server name differing from the CONNECT host, raw sockets
// and bash /dev/tcp that ignore the proxy) must fail without the host's
// servers seeing a connection, and allowed ones (curl over HTTPS with the
// test CA, Python's urllib, pip installing a wheel from a simple index)
// must work; every attempt through the proxy must be an audit event.
func RunEgress(t *testing.T, newSandbox Factory) {
	h := NewEgressHost(t)
	audit := &AuditLog{}
	b := open(t, newSandbox, sandbox.WithEgress(h.EgressPolicy()), sandbox.WithAudit(audit))
	info := b.sb.Info()
	if info.Egress == nil || !slices.Contains(info.Egress.Allow, EgressAllowed+" (internal addresses allowed)") {
		t.Fatalf("Info().Egress = %+v, want the policy", info.Egress)
	}
	if err := b.sb.Files.Write(b.ctx(), "ca.pem", h.CAPEM, 0); err != nil {
		t.Fatal(err)
	}
	has := func(prog string) bool {
		res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: "command -v " + prog})
		return err == nil && res.ExitCode == 0
	}
	curl, python := has("curl"), info.Python != ""
	pip := python && func() bool {
		res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: "python3 -m pip --version"})
		return err == nil && res.ExitCode == 0
	}()
	sh := func(script string) *sandbox.Result {
		t.Helper()
		script = strings.NewReplacer("$TLS", fmt.Sprint(h.TLSPort), "$HTTP", fmt.Sprint(h.HTTPPort)).Replace(script)
		res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: "exec 2>&1\n" + script, Timeout: 50 * time.Second})
		if err != nil {
			t.Fatalf("running %q: %v", script, err)
		}
		return res
	}
	wantEvent := func(t *testing.T, host, outcome, reason string) {
		t.Helper()
		if audit.find(host, outcome, reason) == nil {
			t.Fatalf("no %s audit event for %s with a reason mentioning %q; events: %v", outcome, host, reason, audit.Events())
		}
	}
	need := func(t *testing.T, ok bool, what string) {
		t.Helper()
		if !ok {
			// curl and pip are the clients this suite promises to
			// prove: where Python is required (CI), their absence
			// fails too.
			Unavailable(t, "python", "no "+what+" in the sandbox (the egress suite's clients: curl, python3, python3 -m pip)")
		}
	}

	// Denied attempts come first, so that the servers' counters show
	// they were never reached.
	t.Run("NotOnList", func(t *testing.T) {
		need(t, curl, "curl")
		out := sh(`curl -sS -f --max-time 30 --cacert ca.pem https://blocked.test:$TLS/hello; echo "exit=$?"`).Stdout
		if !strings.Contains(out, "403") || strings.Contains(out, egressHello) {
			t.Fatalf("a name not on the list was not refused with 403:\n%s", out)
		}
		wantEvent(t, egressBlocked, "denied", "not on the allowlist")
		if h.Resolver.Asked(egressBlocked) {
			t.Error("the host looked up a name that is not on the list")
		}
		out = sh(`curl -sS --max-time 30 http://blocked.test:$HTTP/hello`).Stdout
		if !strings.Contains(out, "blocked.test") || !strings.Contains(out, "--allow-domain") {
			t.Errorf("the 403 body does not name the host and how to allow it:\n%s", out)
		}
	})
	t.Run("IPLiteral", func(t *testing.T) {
		need(t, curl, "curl")
		out := sh(`curl -sS -f --max-time 30 --noproxy '' --cacert ca.pem https://127.0.0.1:$TLS/hello; echo "exit=$?"
curl -sS -f --max-time 30 --noproxy '' http://127.0.0.1:$HTTP/hello; echo "exit=$?"`).Stdout
		if strings.Count(out, "403") < 2 || strings.Contains(out, egressHello) {
			t.Fatalf("IP literal targets were not refused with 403:\n%s", out)
		}
		wantEvent(t, "127.0.0.1", "denied", "IP address targets are refused")
	})
	t.Run("DeniedRange", func(t *testing.T) {
		need(t, curl, "curl")
		out := sh(`curl -sS -f --max-time 30 http://private.test:$HTTP/hello; echo "exit=$?"
curl -sS -f --max-time 30 --cacert ca.pem https://private.test:$TLS/hello; echo "exit=$?"`).Stdout
		if strings.Count(out, "403") < 2 || strings.Contains(out, egressHello) {
			t.Fatalf("a name resolving to loopback was not refused with 403:\n%s", out)
		}
		wantEvent(t, egressPrivate, "denied", "refused addresses")
	})
	t.Run("SNIMismatch", func(t *testing.T) {
		need(t, python, "python")
		// The server's certificate also covers other.test, so only the
		// proxy's check can stop this handshake.
		out := sh(`python3 - <<'PY'
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(b"CONNECT pkgs.test:$TLS HTTP/1.1\r\nHost: pkgs.test:$TLS\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
print("proxy:", head.split(b"\r\n")[0].decode())
ctx = ssl.create_default_context(cafile="ca.pem")
try:
    t = ctx.wrap_socket(s, server_hostname="other.test")
    t.sendall(b"GET /hello HTTP/1.0\r\nHost: other.test\r\n\r\n")
    print("ESCAPED:", t.recv(4096))
except Exception as e:
    print("refused:", type(e).__name__, e)
PY`).Stdout
		if strings.Contains(out, "ESCAPED") || !strings.Contains(out, "refused:") {
			t.Fatalf("a TLS session for another name passed a CONNECT tunnel:\n%s", out)
		}
		wantEvent(t, EgressAllowed, "denied", "differs from the CONNECT host")
	})
	t.Run("NotTLSInTunnel", func(t *testing.T) {
		need(t, python, "python")
		out := sh(`python3 - <<'PY'
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(b"CONNECT pkgs.test:$HTTP HTTP/1.1\r\n\r\nGET /hello HTTP/1.0\r\nHost: pkgs.test\r\n\r\n")
data = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    data += b
print("got:", data)
PY`).Stdout
		if strings.Contains(out, egressHello) {
			t.Fatalf("plain HTTP passed a CONNECT tunnel unchecked:\n%s", out)
		}
		wantEvent(t, EgressAllowed, "denied", "does not start with a TLS client hello")
	})
	t.Run("IgnoringTheProxy", func(t *testing.T) {
		script := `bash -c 'exec 3<>/dev/tcp/127.0.0.1/$TLS' && echo ESCAPED:devtcp-tls
bash -c 'exec 3<>/dev/tcp/127.0.0.1/$HTTP' && echo ESCAPED:devtcp-http
echo probes-done`
		if curl {
			script += "\ncurl -sS --max-time 10 --noproxy '*' http://pkgs.test:$HTTP/hello && echo ESCAPED:curl-noproxy"
		}
		if python {
			script += `
python3 -c "
import socket
for p in ($TLS, $HTTP):
    try:
        socket.create_connection(('127.0.0.1', p), timeout=5); print('ESCAPED:python-socket')
    except Exception as e:
        print('refused', e)
"`
		}
		out := sh(script).Stdout
		if strings.Contains(out, "ESCAPED") || !strings.Contains(out, "probes-done") {
			t.Fatalf("a program ignoring the proxy reached the host:\n%s", out)
		}
	})
	if n := h.Conns(); n != 0 {
		t.Fatalf("the host's servers accepted %d connections from denied attempts", n)
	}

	t.Run("CurlHTTPS", func(t *testing.T) {
		need(t, curl, "curl")
		out := sh(`curl -sS -f --max-time 30 --cacert ca.pem https://pkgs.test:$TLS/hello`)
		if out.ExitCode != 0 || !strings.Contains(out.Stdout, egressHello) {
			t.Fatalf("curl over HTTPS to an allowed name failed (exit %d):\n%s", out.ExitCode, out.Stdout)
		}
		e := audit.find(EgressAllowed, "allowed", "")
		if e == nil || e["bytes_in"] == "0" || e["addr"] != fmt.Sprintf("127.0.0.1:%d", h.TLSPort) {
			t.Fatalf("allowed event = %v, want bytes and the dialled address", e)
		}
	})
	t.Run("PythonURLLib", func(t *testing.T) {
		need(t, python, "python")
		out := sh(`python3 -c "
import ssl, urllib.request
print(urllib.request.urlopen('http://pkgs.test:$HTTP/hello', timeout=30).read().decode().strip())
ctx = ssl.create_default_context(cafile='ca.pem')
print(urllib.request.urlopen('https://pkgs.test:$TLS/hello', timeout=30, context=ctx).read().decode().strip())
"`)
		if out.ExitCode != 0 || strings.Count(out.Stdout, egressHello) != 2 {
			t.Fatalf("urllib to an allowed name failed (exit %d):\n%s", out.ExitCode, out.Stdout)
		}
	})
	t.Run("PipInstall", func(t *testing.T) {
		need(t, pip, "pip")
		out := sh(`python3 -m pip install --no-cache-dir --disable-pip-version-check --no-input --target site \
  --index-url https://pkgs.test:$TLS/simple/ --cert ca.pem tinypkg && PYTHONPATH=site python3 -c "import tinypkg; print(tinypkg.MSG)"`)
		if out.ExitCode != 0 || !strings.Contains(out.Stdout, "tinypkg installed through the egress proxy") {
			t.Fatalf("pip install from the allowed index failed (exit %d):\n%s", out.ExitCode, out.Stdout)
		}
	})
	t.Run("Limits", func(t *testing.T) {
		need(t, python, "python")
		need(t, curl, "curl")
		p := h.EgressPolicy()
		p.MaxConns, p.MaxBytes = 1, 1<<20
		lb := open(t, newSandbox, sandbox.WithEgress(p), sandbox.WithAudit(audit))
		if err := lb.sb.Files.Write(lb.ctx(), "ca.pem", h.CAPEM, 0); err != nil {
			t.Fatal(err)
		}
		run := func(script string) string {
			script = strings.NewReplacer("$TLS", fmt.Sprint(h.TLSPort), "$HTTP", fmt.Sprint(h.HTTPPort)).Replace(script)
			res, err := lb.sb.Commands.Run(lb.ctx(), sandbox.Command{Shell: "exec 2>&1\n" + script, Timeout: 50 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return res.Stdout
		}
		// One tunnel held open takes the only slot: the next connection
		// is answered 429, naming the limit.
		out := run(`python3 - <<'PY'
import socket, ssl, urllib.request, urllib.error
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(b"CONNECT pkgs.test:$TLS HTTP/1.1\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
t = ssl.create_default_context(cafile="ca.pem").wrap_socket(s, server_hostname="pkgs.test")
try:
    urllib.request.urlopen("http://pkgs.test:$HTTP/hello", timeout=30)
    print("second connection allowed")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
t.close()
PY`)
		if !strings.Contains(out, "429") || !strings.Contains(out, "MaxConns") {
			t.Errorf("a connection past MaxConns was not refused with 429 naming the limit:\n%s", out)
		}
		// A 10 MB download passes the 1 MiB byte limit: it is cut, and
		// later connections are refused naming the limit.
		out = run(`curl -sS -f --max-time 30 -o /dev/null http://pkgs.test:$HTTP/big; echo "exit=$?"; curl -sS --max-time 30 http://pkgs.test:$HTTP/hello`)
		if strings.Contains(out, "exit=0") || !strings.Contains(out, "MaxBytes") {
			t.Errorf("the byte limit did not cut the download and refuse the next request:\n%s", out)
		}
		if audit.find(EgressAllowed, "allowed", "byte limit") == nil || audit.find(EgressAllowed, "denied", "byte limit") == nil {
			t.Errorf("the byte limit's cut and refusal are not audit events: %v", audit.Events())
		}
	})
	t.Run("EveryAttemptAudited", func(t *testing.T) {
		for _, e := range audit.Events() {
			for _, k := range []string{"host", "port", "outcome", "bytes_in", "bytes_out", "duration"} {
				if _, ok := e[k]; !ok {
					t.Errorf("audit event %v lacks %s", e, k)
				}
			}
		}
		if len(audit.Events()) < 8 {
			t.Errorf("only %d egress audit events for the attempts above: %v", len(audit.Events()), audit.Events())
		}
	})
}
