package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

// TestDemoEgress: with --allow-domain the demo shows the proxy refusing a
// name not on the list (before any DNS lookup: no traffic leaves).
func TestDemoEgress(t *testing.T) {
	if len(isolationFlags(t)) > 0 {
		t.Skip("no namespace tier here: egress needs it (or Docker)")
	}
	r := runBinary(t, "", "demo", "--allow-domain", "pypi.org", "--allow-domain", "*.pythonhosted.org")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"network only to pypi.org, *.pythonhosted.org (egress proxy)", "it saw 0 connections",
		`egress allowed to pypi.org, *.pythonhosted.org only: the proxy answers http://not-on-the-list.invalid/ with "HTTP/1.1 403 Forbidden by the sandbox's egress policy"`,
		"egress             enforced=true  HTTP/HTTPS proxy on the sandbox's own loopback"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runBinary(t, "", "demo", "--allow-domain", "not a name")
	if r.code != exitUsage || !strings.Contains(r.stderr, "not a host name") {
		t.Errorf("demo --allow-domain 'not a name': exit %d, stderr %q; want a usage error naming the problem", r.code, r.stderr)
	}
}

// TestDemoNetworkOnProcessTier: where the tier does not block the network,
// the demo says it cannot prove anything instead of claiming a proof.
func TestDemoNetworkOnProcessTier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.WithDriver(local.New(local.WithTier(sandbox.TierProcess))), sandbox.AllowWeaker(sandbox.TierProcess))
	if err != nil {
		t.Skipf("no process-tier sandbox here: %v", err)
	}
	defer sb.Close()
	lines, err := demoNetwork(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "the process tier does not block the network, so this demo cannot prove anything") {
		t.Fatalf("demo network lines on the process tier: %q", lines)
	}
}

// TestAllowDomainFlag: run and mcp take --allow-domain (repeatable); the
// command inside finds the proxy in the usual variables, and the flag
// refuses to be combined with --allow-network.
func TestAllowDomainFlag(t *testing.T) {
	if len(isolationFlags(t)) > 0 {
		t.Skip("no namespace tier here: egress needs it (or Docker)")
	}
	r := runBinary(t, "", "run", "--allow-domain", "pypi.org", "--allow-domain", "files.pythonhosted.org:443", "--", "sh", "-c", `echo "$HTTPS_PROXY $NO_PROXY"`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "http://127.0.0.1:3128 localhost,127.0.0.1,::1" {
		t.Errorf("run --allow-domain: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, cmd := range []string{"run", "mcp"} {
		args := []string{cmd, "--allow-domain", "pypi.org", "--allow-network"}
		if cmd == "run" {
			args = append(args, "--", "true")
		}
		r := runBinary(t, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "contradict") {
			t.Errorf("%s --allow-domain --allow-network: exit %d, stderr %q; want a usage error", cmd, r.code, r.stderr)
		}
	}
}

// TestMCPAllowDomainIsAnOpenWorld: with --allow-domain the sandbox reaches
// the listed names, so the tools must not claim a closed world
// (openWorldHint false), and sandbox_info names the domains.
func TestMCPAllowDomainIsAnOpenWorld(t *testing.T) {
	if len(isolationFlags(t)) > 0 {
		t.Skip("no namespace tier here: egress needs it (or Docker)")
	}
	c, _ := startStdio(t, "--allow-domain", "pypi.org")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := c.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if h := tool.Annotations.OpenWorldHint; h != nil && !*h {
			t.Errorf("%s: openWorldHint false although sandboxes reach pypi.org", tool.Name)
		}
	}
	if got := c.ok(t, "sandbox_info", nil); !strings.Contains(got, "network: only HTTP/HTTPS to pypi.org") {
		t.Errorf("sandbox_info with --allow-domain: %s", got)
	}
	// The weaker-tier probe must not call an egress sandbox closed either.
	if closedWorld(ctx, []sandbox.Option{sandbox.WithEgress(sandbox.EgressPolicy{Allow: sandbox.AllowDomains("pypi.org")})}) {
		t.Error("closedWorld calls a sandbox with an egress policy a closed world")
	}
}
