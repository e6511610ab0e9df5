package sandboxtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestEgressLocalNamespace runs the egress suite on the local backend's
// namespace tier.
func TestEgressLocalNamespace(t *testing.T) {
	sandboxtest.RunEgress(t, localFactory(t, "namespace", sandbox.RequireIsolation(sandbox.TierNamespace)))
}

// TestEscapeLocalNamespaceEgress runs the escape suite on the namespace
// tier with egress allowed to one name (at the egress test servers' ports
// only): nothing else may become reachable.
func TestEscapeLocalNamespaceEgress(t *testing.T) {
	h := sandboxtest.NewEgressHost(t)
	p := h.EgressPolicy()
	p.Allow = []sandbox.EgressRule{{Host: sandboxtest.EgressAllowed, Ports: []int{h.TLSPort, h.HTTPPort}, Internal: true}}
	t.Cleanup(func() {
		// After the parallel probes.
		if n := h.Conns(); n != 0 {
			t.Errorf("the escape probes reached the allowed name's servers %d times", n)
		}
	})
	sandboxtest.RunEscape(t, localFactory(t, "namespace", sandbox.RequireIsolation(sandbox.TierNamespace), sandbox.WithEgress(p)))
}

// TestEgressRefusedOnLandlock: the landlock tier has no private loopback
// for the proxy (and its seccomp filter allows only unix sockets), so it
// refuses an egress policy, naming the tiers that hold one.
func TestEgressRefusedOnLandlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := sandboxtest.NewEgressHost(t)
	for _, tier := range []sandbox.Tier{sandbox.TierLandlock, sandbox.TierProcess} {
		sb, err := sandbox.New(ctx, sandbox.WithDriver(local.New(local.WithTier(tier))), sandbox.AllowWeaker(tier), sandbox.WithEgress(h.EgressPolicy()))
		if err == nil {
			sb.Close()
			t.Fatalf("a %s sandbox accepted an egress policy", tier)
		}
		if sandbox.CodeOf(err) != sandbox.CodeIsolationUnavailable || !strings.Contains(err.Error(), "namespace tier or the Docker backend") {
			t.Errorf("%s tier: %v, want SBX_ISOLATION_UNAVAILABLE naming the namespace tier and Docker", tier, err)
		}
	}
}

// BenchmarkEgressDownload downloads 10 MB with curl through the egress
// proxy of a namespace sandbox (over HTTP, and over HTTPS through a
// CONNECT tunnel) and, in the same iteration, the same download with curl
// run directly on the host: the floor. Alternating the two keeps a busy
// machine's drift out of the comparison. It reports the time of each and
// their ratio (proxy/direct; the target is at most 1.5).
func BenchmarkEgressDownload(b *testing.B) {
	if _, err := exec.LookPath("curl"); err != nil {
		b.Skip("no curl on this machine")
	}
	h := sandboxtest.NewEgressHost(b)
	ca := filepath.Join(b.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, h.CAPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.RequireIsolation(sandbox.TierNamespace), sandbox.WithEgress(h.EgressPolicy()))
	if err != nil {
		b.Skipf("no namespace sandbox here: %v", err)
	}
	defer sb.Close()
	if err := sb.Files.Write(ctx, "ca.pem", h.CAPEM, 0); err != nil {
		b.Fatal(err)
	}
	want := fmt.Sprint(h.BigSize)
	for _, scheme := range []string{"http", "https"} {
		port := h.HTTPPort
		if scheme == "https" {
			port = h.TLSPort
		}
		url := fmt.Sprintf("%s://%s:%d/big", scheme, sandboxtest.EgressAllowed, port)
		b.Run(scheme, func(b *testing.B) {
			b.SetBytes(int64(h.BigSize))
			var direct, proxied time.Duration
			for range b.N {
				// The floor: the host's curl, given the name's address
				// (--resolve), with the same CA checks.
				t0 := time.Now()
				out, err := exec.Command("curl", "-sS", "-f", "--cacert", ca, "--resolve", fmt.Sprintf("%s:%d:127.0.0.1", sandboxtest.EgressAllowed, port),
					"-o", "/dev/null", "-w", "%{size_download}", url).Output()
				direct += time.Since(t0)
				if err != nil || string(out) != want {
					b.Fatalf("direct download: %q, %v", out, err)
				}
				t0 = time.Now()
				res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"curl", "-sS", "-f", "--cacert", "ca.pem", "-o", "/dev/null", "-w", "%{size_download}", url}})
				proxied += time.Since(t0)
				if err != nil || res.ExitCode != 0 || res.Stdout != want {
					b.Fatalf("download through the proxy: %+v, %v", res, err)
				}
			}
			b.ReportMetric(float64(direct.Nanoseconds())/float64(b.N), "direct-ns/op")
			b.ReportMetric(float64(proxied.Nanoseconds())/float64(b.N), "proxy-ns/op")
			b.ReportMetric(float64(proxied)/float64(direct), "proxy/direct")
		})
	}
}
