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

// required reports whether SANDBOXKIT_REQUIRE names the tier, which makes
// its absence a failure instead of a skip (CI sets it).
func required(tier string) bool {
	for _, r := range strings.Split(os.Getenv("SANDBOXKIT_REQUIRE"), ",") {
		if strings.TrimSpace(r) == tier {
			return true
		}
	}
	return false
}

// localFactory creates sandboxes on the local backend with opts first.
// probe is the first sandbox, made to find out whether the tier can be
// built here at all: where it cannot, the test skips, or fails when
// SANDBOXKIT_REQUIRE names the tier.
func localFactory(t *testing.T, tier string, opts ...sandbox.Option) sandboxtest.Factory {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe, err := sandbox.New(ctx, opts...)
	if err != nil {
		if required(tier) {
			t.Fatalf("SANDBOXKIT_REQUIRE=%s but the %s tier is unavailable: %v", tier, tier, err)
		}
		t.Skipf("%s tier unavailable: %v", tier, err)
	}
	probe.Close()
	return func(t *testing.T, more ...sandbox.Option) *sandbox.Sandbox {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sb, err := sandbox.New(ctx, append(append([]sandbox.Option{}, opts...), more...)...)
		if err != nil {
			if sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable && len(more) > 0 && tier != "namespace" {
				// A limit this weaker tier does not claim to enforce.
				t.Skipf("the %s tier refuses this probe's limits (it does not claim them): %v", tier, err)
			}
			t.Fatalf("sandbox.New: %v", err)
		}
		return sb
	}
}

// TestEscapeLocalNamespace runs the escape suite on the local backend's
// namespace tier, where every probe must fail.
func TestEscapeLocalNamespace(t *testing.T) {
	sandboxtest.RunEscape(t, localFactory(t, "namespace", sandbox.RequireIsolation(sandbox.TierNamespace)))
}

// TestEscapeLocalLandlock runs the escape suite on the landlock tier (forced
// with local.WithTier even where namespaces work). Probes of controls that
// tier does not claim are skipped with the gap Info reports.
func TestEscapeLocalLandlock(t *testing.T) {
	sandboxtest.RunEscape(t, localFactory(t, "landlock",
		sandbox.WithDriver(local.New(local.WithTier(sandbox.TierLandlock))), sandbox.AllowWeaker(sandbox.TierLandlock)))
}
