package sandboxtest_test

import (
	"context"
	"fmt"
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

// BenchmarkEgressDownload: a 10 MB download with curl through the egress
// proxy of a namespace sandbox against the same download by curl on the
// host, in the same iterations (sandboxtest.BenchEgressDownload).
func BenchmarkEgressDownload(b *testing.B) {
	sandboxtest.BenchEgressDownload(b, func(b *testing.B, opts ...sandbox.Option) *sandbox.Sandbox {
		sb, err := sandbox.New(context.Background(), append(opts, sandbox.RequireIsolation(sandbox.TierNamespace))...)
		if err != nil {
			sandboxtest.Unavailable(b, "namespace", fmt.Sprintf("no namespace sandbox here: %v", err))
		}
		b.Cleanup(func() { sb.Close() })
		return sb
	})
}
