package sandboxtest_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	// This test binary is also the sandbox's agent when re-executed.
	local.RunStage()
	os.Exit(m.Run())
}

// TestEscapeLocalNamespace runs the escape suite on the local backend's
// namespace tier. It skips where that tier cannot be built, unless
// SANDBOXKIT_REQUIRE names "namespace" (as CI sets it), where it fails.
func TestEscapeLocalNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe, err := sandbox.New(ctx, sandbox.RequireIsolation(sandbox.TierNamespace))
	if err != nil {
		if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "namespace") {
			t.Fatalf("SANDBOXKIT_REQUIRE=namespace but the namespace tier is unavailable: %v", err)
		}
		t.Skipf("namespace tier unavailable: %v", err)
	}
	probe.Close()
	sandboxtest.RunEscape(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.RequireIsolation(sandbox.TierNamespace)}, opts...)...)
		if err != nil {
			t.Fatalf("sandbox.New: %v", err)
		}
		return sb
	})
}
