package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Egress by name: a sandbox that may reach a few named hosts and nothing
// else.
//
// The sandbox keeps no network interface besides its own loopback. The
// agent listens on that loopback (EgressProxyAddr) and carries every
// connection made to it over its stream to the host, where this package
// plays the HTTP proxy: it reads the CONNECT target or the request's host,
// checks it against the policy, resolves the name itself, checks every
// address it will dial, checks the TLS server name of a CONNECT tunnel,
// and only then dials. Nothing inside the sandbox takes part in a
// decision: the agent and everything else on that side of the stream are
// under the control of the code the sandbox runs.
//
// What it stops: connections to any host not on the list (the cloud
// metadata address, the host's own services, the private network),
// whatever the program does, since a program that ignores the proxy
// variables has no route at all; DNS rebinding (the address checked is
// the address dialled); a name on the list resolving into a private range;
// domain fronting by SNI (the TLS server name must be the CONNECT host).
// What it does not stop: anything sent to a host on the list (an allowed
// domain that accepts uploads is an exfiltration channel), or HTTP-level
// fronting inside TLS to an allowed CDN (the Host header inside the
// encrypted stream cannot be seen). The host process dials: with a remote
// Docker engine that is the client machine, not the engine's.

// EgressProxyAddr is where programs inside a sandbox with an egress policy
// find the proxy (its own loopback; the proxy variables point here).
const EgressProxyAddr = "127.0.0.1:3128"

// Egress defaults.
const (
	// DefaultEgressConns bounds the connections open through the proxy
	// at once.
	DefaultEgressConns = 64
	// DefaultEgressBytes bounds the bytes the proxy carries, both ways,
	// over the sandbox's life.
	DefaultEgressBytes = 4 << 30
)

// EgressPolicy lets a sandbox reach named hosts through an HTTP/HTTPS
// proxy that the host runs; everything else is denied (see WithEgress).
type EgressPolicy struct {
	// Allow lists the destinations. A connection is allowed when one rule
	// matches its host and port.
	Allow []EgressRule
	// Resolver resolves allowed names on the host (default: the host's
	// resolver). Names not on the list are never looked up.
	Resolver Resolver
	// MaxConns bounds the connections open at once (default
	// DefaultEgressConns); more are answered with HTTP 429.
	MaxConns int
	// MaxBytes bounds the bytes carried both ways over the sandbox's life
	// (default DefaultEgressBytes); past it connections are cut and new
	// ones answered with HTTP 429.
	MaxBytes int64
}

// EgressRule allows one host, or a family of hosts.
type EgressRule struct {
	// Host is a DNS name ("pypi.org"), a wildcard matching every name
	// below a domain but not the domain itself ("*.pythonhosted.org"), an
	// IP address ("203.0.113.7") or a prefix ("203.0.113.0/24"). Plain IP
	// targets are refused unless a rule names them this way.
	Host string
	// Ports restricts the rule to these ports; empty means any port.
	Ports []int
	// Internal lets this rule's names resolve to addresses that are
	// otherwise refused: loopback, private (RFC 1918), link-local
	// (169.254.169.254, the cloud metadata address), unique-local,
	// carrier-grade NAT, multicast and other special ranges. A rule whose
	// Host is an address or prefix names its range itself and needs no
	// Internal.
	Internal bool
}

// String writes the rule as AllowDomains reads it, with " (internal
// addresses allowed)" when Internal is set.
func (r EgressRule) String() string {
	s := r.Host
	if strings.Contains(s, ":") && !strings.Contains(s, "/") {
		s = "[" + s + "]"
	}
	if len(r.Ports) > 0 {
		ps := make([]string, len(r.Ports))
		for i, p := range r.Ports {
			ps[i] = strconv.Itoa(p)
		}
		s += ":" + strings.Join(ps, ",")
	}
	if r.Internal {
		s += " (internal addresses allowed)"
	}
	return s
}

// AllowDomains returns one rule per entry, each "HOST" or "HOST:PORT"
// (ports separated by commas: "example.com:80,443"; an IPv6 address in
// brackets). A malformed entry makes New fail with SBX_INVALID_ARGUMENT.
func AllowDomains(entries ...string) []EgressRule {
	out := make([]EgressRule, 0, len(entries))
	for _, e := range entries {
		r, err := ParseEgressRule(e)
		if err != nil {
			// Kept as written: New reports it.
			r = EgressRule{Host: e}
		}
		out = append(out, r)
	}
	return out
}

// ParseEgressRule reads one "HOST" or "HOST:PORT[,PORT...]" entry, as the
// command line's --allow-domain takes it.
func ParseEgressRule(s string) (EgressRule, error) {
	s = strings.TrimSpace(s)
	host, ports := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return EgressRule{}, fmt.Errorf("%q: missing ] after the IPv6 address", s)
		}
		host, ports = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if rest := s[end+1:]; rest != "" && !strings.HasPrefix(rest, ":") {
			return EgressRule{}, fmt.Errorf("%q: expected :PORT after the ]", s)
		}
	} else if i := strings.LastIndex(s, ":"); i >= 0 && strings.Count(s, ":") == 1 {
		host, ports = s[:i], s[i+1:]
		if ports == "" {
			return EgressRule{}, fmt.Errorf("%q: a port after the colon", s)
		}
	}
	r := EgressRule{Host: host}
	if ports != "" {
		for _, p := range strings.Split(ports, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || n < 1 || n > 65535 {
				return EgressRule{}, fmt.Errorf("%q: %q is not a port (1-65535)", s, p)
			}
			r.Ports = append(r.Ports, n)
		}
	}
	if _, err := compileRule(r); err != nil {
		return EgressRule{}, err
	}
	return r, nil
}

// Resolver resolves host names to addresses (*net.Resolver is one).
// Tests inject their own so that no query leaves the machine.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// WithEgress lets the sandbox reach the hosts p allows, over HTTP and
// HTTPS through a proxy whose policy the host enforces, and nothing else.
// Programs inside find the proxy in HTTP_PROXY, HTTPS_PROXY, ALL_PROXY
// (and their lower-case forms); programs that ignore them get no network.
// It needs a sandbox whose only network is its own loopback (the local
// backend's namespace tier, Docker): other tiers fail New with
// SBX_ISOLATION_UNAVAILABLE. Every connection, allowed or denied, is an
// audit event (WithAudit). It cannot be combined with WithNetwork.
func WithEgress(p EgressPolicy) Option {
	return func(c *config) { c.egress = &p }
}

// EgressInfo reports a sandbox's egress policy (Info().Egress).
type EgressInfo struct {
	// Allow lists the rules in force as written (EgressRule.String).
	Allow []string
	// Proxy is the proxy's URL as programs inside see it.
	Proxy string
	// Mechanism says how the policy is enforced.
	Mechanism string
}

// rule is a compiled EgressRule.
type rule struct {
	src      EgressRule
	name     string       // exact name, lower case, no trailing dot
	suffix   string       // ".example.com" for "*.example.com"
	prefix   netip.Prefix // for address rules
	ports    []int
	internal bool
}

// matchesName reports whether a name rule matches name: exactly, or as a
// name below the wildcard's domain (never the domain itself).
func (r rule) matchesName(name string) bool {
	return name == r.name || (r.suffix != "" && strings.HasSuffix(name, r.suffix))
}

// compileRule checks a rule and puts it in the form decide matches.
func compileRule(r EgressRule) (rule, error) {
	c := rule{src: r, ports: r.Ports, internal: r.Internal}
	for _, p := range r.Ports {
		if p < 1 || p > 65535 {
			return c, fmt.Errorf("egress rule %q: port %d is out of range (1-65535)", r.Host, p)
		}
	}
	h := strings.TrimSpace(r.Host)
	if p, err := netip.ParsePrefix(h); err == nil {
		c.prefix = p.Masked()
		return c, nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		c.prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return c, nil
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	wild := strings.HasPrefix(name, "*.")
	if wild {
		name = name[2:]
	}
	if !validName(name) {
		return c, fmt.Errorf("egress rule %q is not a host name, a *.domain wildcard, an IP address or a prefix (names are ASCII: write an international name in its xn-- form)", r.Host)
	}
	if wild {
		c.suffix = "." + name
	} else {
		c.name = name
	}
	return c, nil
}

// validName reports whether s is a DNS name of letters, digits, hyphens
// and underscores in dot-separated labels of at most 63 bytes.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			b := l[i]
			if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '_') {
				return false
			}
		}
	}
	return true
}

// compiledPolicy is an EgressPolicy checked by New.
type compiledPolicy struct {
	rules    []rule
	resolver Resolver
	maxConns int
	maxBytes int64
}

func compilePolicy(p EgressPolicy) (*compiledPolicy, error) {
	if len(p.Allow) == 0 {
		return nil, fmt.Errorf("the egress policy allows no host: name at least one (without WithEgress a sandbox has no network at all)")
	}
	cp := &compiledPolicy{resolver: p.Resolver, maxConns: p.MaxConns, maxBytes: p.MaxBytes}
	if cp.resolver == nil {
		cp.resolver = net.DefaultResolver
	}
	if cp.maxConns <= 0 {
		cp.maxConns = DefaultEgressConns
	}
	if cp.maxConns > wire.MaxProxyConns {
		return nil, fmt.Errorf("EgressPolicy.MaxConns is %d, over the most the agent carries at once (%d)", cp.maxConns, wire.MaxProxyConns)
	}
	if cp.maxBytes <= 0 {
		cp.maxBytes = DefaultEgressBytes
	}
	for _, r := range p.Allow {
		c, err := compileRule(r)
		if err != nil {
			return nil, err
		}
		cp.rules = append(cp.rules, c)
	}
	return cp, nil
}

// matchName returns the first rule allowing name:port.
func (cp *compiledPolicy) matchName(name string, port int) (rule, bool) {
	for _, r := range cp.rules {
		if r.prefix.IsValid() || (len(r.ports) > 0 && !slices.Contains(r.ports, port)) {
			continue
		}
		if r.matchesName(name) {
			return r, true
		}
	}
	return rule{}, false
}

// namesHost reports whether a name rule matches host on some port (so a
// refusal can say the port is what is missing).
func (cp *compiledPolicy) namesHost(host string) bool {
	for _, r := range cp.rules {
		if !r.prefix.IsValid() && r.matchesName(host) {
			return true
		}
	}
	return false
}

// matchAddr returns the first address rule containing a:port.
func (cp *compiledPolicy) matchAddr(a netip.Addr, port int) (rule, bool) {
	for _, r := range cp.rules {
		if r.prefix.IsValid() && r.prefix.Contains(a) && (len(r.ports) == 0 || slices.Contains(r.ports, port)) {
			return r, true
		}
	}
	return rule{}, false
}

func (cp *compiledPolicy) describe() []string {
	out := make([]string, len(cp.rules))
	for i, r := range cp.rules {
		out[i] = r.src.String()
	}
	return out
}

// specialRanges are refused as dial targets unless a rule names them
// (EgressRule.Internal, or an address rule). Each would let a sandbox
// reach something a public name has no business resolving to.
var specialRanges = func() []struct {
	p    netip.Prefix
	what string
} {
	list := []struct{ p, what string }{
		{"0.0.0.0/8", "\"this network\" (0.0.0.0 connects to the host itself on Linux)"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "carrier-grade NAT (some clouds' metadata services live here)"},
		{"127.0.0.0/8", "loopback (the host's own services)"},
		{"169.254.0.0/16", "link-local (169.254.169.254 is the cloud metadata service)"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved (and broadcast)"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback (the host's own services)"},
		{"64:ff9b::/96", "NAT64 (would reach any IPv4 address, private ones included)"},
		{"64:ff9b:1::/48", "local NAT64"},
		{"2002::/16", "6to4 (embeds an IPv4 address)"},
		{"fc00::/7", "unique-local (private)"},
		{"fe80::/10", "link-local"},
		{"ff00::/8", "multicast"},
	}
	out := make([]struct {
		p    netip.Prefix
		what string
	}, len(list))
	for i, l := range list {
		out[i].p, out[i].what = netip.MustParsePrefix(l.p), l.what
	}
	return out
}()

// specialRange names the refused range holding a, or "" for a public
// address. a must be unmapped (an IPv4-mapped IPv6 address is checked as
// the IPv4 address it is).
func specialRange(a netip.Addr) string {
	for _, r := range specialRanges {
		if r.p.Contains(a) {
			return r.what
		}
	}
	return ""
}

// compileEgress checks the caller's egress policy (nil when none).
func (c *config) compileEgress() (*compiledPolicy, error) {
	if c.egress == nil {
		return nil, nil
	}
	if c.network {
		return nil, newError(CodeInvalidArgument, "New", "WithNetwork and WithEgress contradict each other: WithNetwork opens the whole network, WithEgress only the hosts it names; use one")
	}
	cp, err := compilePolicy(*c.egress)
	if err != nil {
		return nil, newError(CodeInvalidArgument, "New", "%v", err)
	}
	return cp, nil
}

// checkEgressTier refuses egress where the sandbox has no private loopback
// of its own: there the proxy would listen where every process of the
// host can reach it, and the tier's network control (if any) blocks the
// programs' sockets altogether. Never report a policy a tier cannot hold.
func checkEgressTier(iso driver.Isolation) error {
	netIsolated := false
	for _, ctl := range iso.Controls {
		if ctl.Name == "network" {
			netIsolated = ctl.Enforced
		}
	}
	if iso.Tier >= TierNamespace && netIsolated {
		return nil
	}
	return newError(CodeIsolationUnavailable, "New", "egress by name (WithEgress, --allow-domain) needs a sandbox whose only network is its own loopback, where the proxy listens: the local backend's namespace tier or the Docker backend. This sandbox is tier %s, which cannot hold it; use one of those, or drop the egress policy", iso.Tier)
}

// egressControl is the Info control of an egress policy.
func egressControl(cp *compiledPolicy) Control {
	return Control{Name: "egress", Enforced: true, Mechanism: egressMechanism(cp)}
}

func egressMechanism(cp *compiledPolicy) string {
	return fmt.Sprintf("HTTP/HTTPS proxy on the sandbox's own loopback (%s), each connection handed to the host (the program's socket itself, over the agent's stream where it is a unix socket, or a unix socket the backend mounts for it) or carried over the agent's stream, and the host allows only %s: names checked before any DNS lookup, resolved on the host, private/loopback/link-local addresses refused unless a rule is marked internal, TLS server name checked against the CONNECT host; programs that ignore the proxy have no network",
		EgressProxyAddr, strings.Join(cp.describe(), ", "))
}

// withProxyEnv adds the proxy variables to the caller's environment (the
// caller's own values win).
func withProxyEnv(env map[string]string) map[string]string {
	out := map[string]string{}
	url := "http://" + EgressProxyAddr
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		out[k] = url
	}
	out["NO_PROXY"], out["no_proxy"] = "localhost,127.0.0.1,::1", "localhost,127.0.0.1,::1"
	for k, v := range env {
		out[k] = v
	}
	return out
}

// startEgress serves the proxy on the connections the agent carries.
func (sb *Sandbox) startEgress(cp *compiledPolicy) error {
	if got := sb.client.Hello().Proxy; got != EgressProxyAddr {
		return newError(CodeIsolationUnavailable, "New", "the sandbox's agent did not start the egress proxy on %s (it reported %q): use the same sandboxkit version for the agent as for the host", EgressProxyAddr, got)
	}
	sb.egress = cp
	p := newEgressProxy(cp, sb.auditEgress)
	go p.serve(sb.client.Egress())
	if hs, ok := sb.inst.(driver.HandoffSocket); ok {
		if l, _ := hs.HandoffSocket(); l != nil {
			go sb.client.ServeEgressHandoff(l)
		}
	}
	sb.onClose(p.close)
	return nil
}

// handoffPath is the path inside the sandbox of inst's handoff socket
// (driver.HandoffSocket), "" when it has none.
func handoffPath(inst driver.Instance) string {
	if hs, ok := inst.(driver.HandoffSocket); ok {
		if l, path := hs.HandoffSocket(); l != nil {
			return path
		}
	}
	return ""
}

// egressInfo reports the policy (Info().Egress).
func (sb *Sandbox) egressInfo() *EgressInfo {
	if sb.egress == nil {
		return nil
	}
	return &EgressInfo{Allow: sb.egress.describe(), Proxy: "http://" + EgressProxyAddr, Mechanism: egressMechanism(sb.egress)}
}

// auditEgress records one proxied connection, allowed or denied.
func (sb *Sandbox) auditEgress(ev egressEvent) {
	if sb.logger == nil {
		return
	}
	level, outcome := slog.LevelInfo, "allowed"
	if !ev.allowed {
		level, outcome = slog.LevelWarn, "denied"
	}
	sb.logger.LogAttrs(context.Background(), level, "sandbox egress",
		slog.String("sandbox", sb.id), slog.String("op", "Egress"), slog.String("outcome", outcome),
		slog.String("method", ev.method), slog.String("host", ev.host), slog.Int("port", ev.port),
		slog.String("addr", ev.addr), slog.String("reason", ev.reason),
		slog.Int64("bytes_out", ev.bytesOut), slog.Int64("bytes_in", ev.bytesIn), slog.Duration("duration", ev.duration))
}
