package local_test

import (
	"context"
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
	goleak.VerifyTestMain(m, leakOptions...)
}

// leakOptions ignores the launcher: one OS-thread-locked goroutine that
// lives as long as the process by design (Pdeathsig is per thread).
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/sandboxkit/sandboxkit/sandbox/local.startLocked.func1.1"),
}

// newLocal creates a sandbox on the local backend at the best tier this
// machine offers, accepting the process tier where nothing better runs.
func newLocal(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.AllowWeaker(sandbox.TierProcess)}, opts...)...)
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
