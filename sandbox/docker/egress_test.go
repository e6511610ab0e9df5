package docker_test

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestEgress runs the egress suite in docker sandboxes: the proxy listens
// on the container's own loopback (network mode none) and the host
// decides and dials.
func TestEgress(t *testing.T) {
	sandboxtest.RunEgress(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, opts...)
	})
}

// TestEscapeEgress runs the escape suite in docker sandboxes allowed to
// reach one name (at the egress test servers' ports only): nothing else
// may become reachable.
func TestEscapeEgress(t *testing.T) {
	h := sandboxtest.NewEgressHost(t)
	p := h.EgressPolicy()
	p.Allow = []sandbox.EgressRule{{Host: sandboxtest.EgressAllowed, Ports: []int{h.TLSPort, h.HTTPPort}, Internal: true}}
	t.Cleanup(func() {
		if n := h.Conns(); n != 0 {
			t.Errorf("the escape probes reached the allowed name's servers %d times", n)
		}
	})
	sandboxtest.RunEscape(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, append([]sandbox.Option{sandbox.WithEgress(p)}, opts...)...)
	})
}

// BenchmarkEgressDownload: a 10 MB download with curl through the egress
// proxy of a docker sandbox against the same download by curl on the
// host, in the same iterations (sandboxtest.BenchEgressDownload). The
// agent's stream is the container's attach stream here, which the tunnel
// cannot splice: every byte is copied through the engine.
func BenchmarkEgressDownload(b *testing.B) {
	sandboxtest.BenchEgressDownload(b, func(b *testing.B, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(b, opts...)
	})
}
