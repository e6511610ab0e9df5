//go:build linux

package local_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	// The test binary is also the sandbox's agent: when re-executed as a
	// stage, this call (like the package's init hook) never returns.
	local.RunStage()
	if arg := os.Getenv(helperEnv); arg != "" {
		os.Exit(sigkillHelper(arg))
	}
	goleak.VerifyTestMain(m, leakOptions...)
}

// leakOptions ignores the launcher: one OS-thread-locked goroutine that
// lives as long as the process by design (Pdeathsig is per thread).
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/sandboxkit/sandboxkit/sandbox/local/isolate.OnLauncherThread.func1.1"),
}

// newLocal creates a sandbox on the local backend at the best tier this
// machine offers, accepting the process tier where nothing better runs,
// unless SANDBOXKIT_REQUIRE names "namespace" (as CI sets it): then it is
// the namespace tier or a failure, never a silent step down.
func newLocal(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []sandbox.Option{sandbox.AllowWeaker(sandbox.TierProcess)}
	if slices.Contains(strings.Split(os.Getenv("SANDBOXKIT_REQUIRE"), ","), "namespace") {
		base = append(base, sandbox.RequireIsolation(sandbox.TierNamespace))
	}
	sb, err := sandbox.New(ctx, append(base, opts...)...)
	if err != nil {
		t.Fatalf("sandbox.New on the local backend: %v", err)
	}
	return sb
}

func TestContract(t *testing.T) {
	sandboxtest.RunContract(t, newLocal)
}

// TestEndlessOutputForTenSeconds is the full-length hostile input of the
// issue: `yes` printing for 10 s keeps memory bounded and its output cut.
func TestEndlessOutputForTenSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s of output; skipped with -short")
	}
	t.Parallel()
	sandboxtest.RunEndlessOutput(t, newLocal, 10*time.Second)
}
