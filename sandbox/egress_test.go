package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// mapResolver resolves from a table and records what it was asked.
type mapResolver struct {
	table map[string][]string
	asked []string
}

func (r *mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.asked = append(r.asked, host)
	var out []netip.Addr
	for _, a := range r.table[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if out == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// TestEgressDecide is the policy's table: which host:port may be dialled,
// at which addresses, and why not.
func TestEgressDecide(t *testing.T) {
	res := &mapResolver{table: map[string][]string{
		"pypi.org":                 {"151.101.0.223"},
		"files.pythonhosted.org":   {"151.101.1.63"},
		"a.b.pythonhosted.org":     {"151.101.1.64"},
		"pythonhosted.org":         {"151.101.1.65"},
		"rebind.example.com":       {"127.0.0.1"},
		"metadata.example.com":     {"169.254.169.254"},
		"mixed.example.com":        {"10.0.0.1", "93.184.216.34"},
		"mapped.example.com":       {"::ffff:127.0.0.1"},
		"ula.example.com":          {"fd00::1"},
		"internal.corp":            {"10.1.2.3"},
		"zero.example.com":         {"0.0.0.0"},
		"nat64.example.com":        {"64:ff9b::a00:1"},
		"cgnat.example.com":        {"100.100.100.200"},
		"ports.example.com":        {"93.184.216.34"},
		"multicast.example.com":    {"224.0.0.251"},
		"v6.example.com":           {"2001:db8::1"},
		"linklocal6.example.com":   {"fe80::1"},
		"broadcastish.example.com": {"255.255.255.255"},
	}}
	cp, err := compilePolicy(EgressPolicy{Resolver: res, Allow: append(AllowDomains(
		"pypi.org", "*.pythonhosted.org", "rebind.example.com", "metadata.example.com", "mixed.example.com",
		"mapped.example.com", "ula.example.com", "zero.example.com", "nat64.example.com", "cgnat.example.com",
		"ports.example.com:443,8443", "multicast.example.com", "v6.example.com", "linklocal6.example.com",
		"broadcastish.example.com", "203.0.113.7", "198.51.100.0/24", "[2001:db8::2]:443"),
		EgressRule{Host: "internal.corp", Internal: true})})
	if err != nil {
		t.Fatal(err)
	}
	p := newEgressProxy(cp, func(egressEvent) {})
	defer p.close()
	for _, tc := range []struct {
		host  string
		port  int
		addrs []string // allowed addresses; nil = denied
		why   string   // part of the denial
	}{
		{"pypi.org", 443, []string{"151.101.0.223"}, ""},
		{"PyPI.org", 443, nil, "not a valid"}, // proxyTarget lower-cases first
		{"files.pythonhosted.org", 443, []string{"151.101.1.63"}, ""},
		{"a.b.pythonhosted.org", 443, []string{"151.101.1.64"}, ""},
		{"pythonhosted.org", 443, nil, "not on the allowlist"},
		{"evilpythonhosted.org", 443, nil, "not on the allowlist"},
		{"pypi.org.evil.com", 443, nil, "not on the allowlist"},
		{"example.com", 80, nil, "not on the allowlist"},
		{"rebind.example.com", 80, nil, "127.0.0.1 (loopback"},
		{"metadata.example.com", 80, nil, "169.254.169.254 (link-local"},
		{"mixed.example.com", 80, []string{"93.184.216.34"}, ""},
		{"mapped.example.com", 80, nil, "loopback"},
		{"ula.example.com", 80, nil, "unique-local"},
		{"zero.example.com", 80, nil, "this network"},
		{"nat64.example.com", 80, nil, "NAT64"},
		{"cgnat.example.com", 80, nil, "carrier-grade NAT"},
		{"multicast.example.com", 80, nil, "multicast"},
		{"linklocal6.example.com", 80, nil, "link-local"},
		{"broadcastish.example.com", 80, nil, "reserved"},
		{"v6.example.com", 443, []string{"2001:db8::1"}, ""},
		{"internal.corp", 22, []string{"10.1.2.3"}, ""},
		{"ports.example.com", 443, []string{"93.184.216.34"}, ""},
		{"ports.example.com", 8443, []string{"93.184.216.34"}, ""},
		{"ports.example.com", 22, nil, "port 22 of ports.example.com is not on the allowlist"},
		{"203.0.113.7", 443, []string{"203.0.113.7"}, ""},
		{"203.0.113.8", 443, nil, "IP address targets are refused"},
		{"198.51.100.99", 80, []string{"198.51.100.99"}, ""},
		{"127.0.0.1", 80, nil, "IP address targets are refused"},
		{"169.254.169.254", 80, nil, "IP address targets are refused"},
		{"::ffff:203.0.113.7", 443, []string{"203.0.113.7"}, ""},
		{"2001:db8::2", 443, []string{"2001:db8::2"}, ""},
		{"2001:db8::2", 80, nil, "IP address targets are refused"},
		{"fe80::1%eth0", 80, nil, "zone"},
		{"a..b", 80, nil, "not a valid"},
		{"xn--bcher-kva.example", 80, nil, "not on the allowlist"},
	} {
		addrs, why := p.decide(tc.host, tc.port)
		var got []string
		for _, a := range addrs {
			got = append(got, a.String())
		}
		if !slices.Equal(got, tc.addrs) || (tc.why != "" && !strings.Contains(why, tc.why)) {
			t.Errorf("decide(%s, %d) = %v, %q; want %v, %q", tc.host, tc.port, got, why, tc.addrs, tc.why)
		}
	}
	for _, n := range []string{"example.com", "pythonhosted.org", "evilpythonhosted.org", "pypi.org.evil.com", "xn--bcher-kva.example"} {
		if slices.Contains(res.asked, n) {
			t.Errorf("%s is not on the list but was looked up", n)
		}
	}
}

// TestEgressRuleParsing: the --allow-domain forms and the refusals.
func TestEgressRuleParsing(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // EgressRule.String, "" = error
	}{
		{"pypi.org", "pypi.org"},
		{"*.pythonhosted.org", "*.pythonhosted.org"},
		{"example.com:443", "example.com:443"},
		{"example.com:80,443", "example.com:80,443"},
		{"10.0.0.1", "10.0.0.1"},
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"[::1]:8080", "[::1]:8080"},
		{"example.com:", ""},
		{"example.com:0", ""},
		{"example.com:http", ""},
		{"*", ""},
		{"*.com*", ""},
		{"ex ample.com", ""},
		{"bücher.example", ""},
		{"foo.*.com", ""},
		{"", ""},
	} {
		r, err := ParseEgressRule(tc.in)
		got := ""
		if err == nil {
			got = r.String()
		}
		if got != tc.want {
			t.Errorf("ParseEgressRule(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestEgressRefusedWhereNotHeld: egress needs the sandbox's own loopback;
// the landlock and process tiers refuse it with a message naming the way
// to get it, and a policy contradicting WithNetwork or allowing nothing is
// an invalid argument.
func TestEgressRefusedWhereNotHeld(t *testing.T) {
	for _, tc := range []struct {
		name string
		iso  Control
		tier Tier
	}{
		{"landlock", Control{Name: "network", Enforced: true, Mechanism: "seccomp: only unix sockets"}, TierLandlock},
		{"process", Control{Name: "network", Enforced: false, Mechanism: "none"}, TierProcess},
		{"namespace without network isolation", Control{Name: "network", Enforced: false}, TierNamespace},
	} {
		err := checkEgressTier(isoOf(tc.tier, tc.iso))
		if CodeOf(err) != CodeIsolationUnavailable || !strings.Contains(err.Error(), "namespace tier or the Docker backend") {
			t.Errorf("%s: %v, want SBX_ISOLATION_UNAVAILABLE naming the namespace tier and Docker", tc.name, err)
		}
	}
	if err := checkEgressTier(isoOf(TierContainer, Control{Name: "network", Enforced: true})); err != nil {
		t.Errorf("container tier with the network isolated: %v", err)
	}
	for _, opts := range [][]Option{
		{WithNetwork(), WithEgress(EgressPolicy{Allow: AllowDomains("pypi.org")})},
		{WithEgress(EgressPolicy{})},
		{WithEgress(EgressPolicy{Allow: AllowDomains("not a name")})},
	} {
		_, err := New(context.Background(), opts...)
		if CodeOf(err) != CodeInvalidArgument {
			t.Errorf("New with a bad egress setting: %v, want SBX_INVALID_ARGUMENT", err)
		}
	}
}

func isoOf(t Tier, c Control) driver.Isolation {
	return driver.Isolation{Tier: t, Controls: []Control{c}}
}

// clientHello builds a TLS 1.2-style client hello record carrying the
// server name sni and, when ech is set, an Encrypted Client Hello
// extension with a placeholder payload.
func clientHello(sni string, ech bool) []byte {
	u16 := func(b []byte, v int) []byte { return append(b, byte(v>>8), byte(v)) }
	var exts []byte
	if sni != "" {
		name := u16([]byte{0}, len(sni)) // host_name, length
		name = append(name, sni...)
		list := u16(nil, len(name))
		list = append(list, name...)
		exts = u16(exts, 0) // server_name
		exts = u16(exts, len(list))
		exts = append(exts, list...)
	}
	if ech {
		payload := make([]byte, 40)
		exts = u16(exts, extEncryptedClientHello)
		exts = u16(exts, len(payload))
		exts = append(exts, payload...)
	}
	body := []byte{3, 3}                     // client_version TLS 1.2
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = u16(body, 2)
	body = u16(body, 0xc02f)  // TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
	body = append(body, 1, 0) // compression: null
	body = u16(body, len(exts))
	body = append(body, exts...)
	hs := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append(u16([]byte{0x16, 3, 1}, len(hs)), hs...)
}

// TestReadClientHello: the server name comes from crypto/tls's own parse,
// every byte read is kept for the destination, and a hello hiding its
// real name with Encrypted Client Hello is refused.
func TestReadClientHello(t *testing.T) {
	hello := clientHello("pkgs.test", false)
	sni, raw, err := readClientHello(bufio.NewReader(bytes.NewReader(append(slices.Clone(hello), "more"...))))
	if err != nil || sni != "pkgs.test" || !bytes.HasPrefix(append(raw, "more"...), hello) {
		t.Fatalf("readClientHello = %q, %d bytes, %v; want pkgs.test and the hello's %d bytes", sni, len(raw), err, len(hello))
	}
	if _, _, err := readClientHello(bufio.NewReader(bytes.NewReader(clientHello("pkgs.test", true)))); err == nil || !strings.Contains(err.Error(), "Encrypted Client Hello") {
		t.Errorf("a hello with ECH: %v, want a refusal naming Encrypted Client Hello", err)
	}
	if _, _, err := readClientHello(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\n\r\n"))); err == nil || !strings.Contains(err.Error(), "does not start with a TLS client hello") {
		t.Errorf("plain HTTP in a tunnel: %v", err)
	}
	if _, _, err := readClientHello(bufio.NewReader(bytes.NewReader([]byte{0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0}))); err == nil {
		t.Error("a malformed hello was accepted")
	}
}
