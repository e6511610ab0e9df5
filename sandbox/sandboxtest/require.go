package sandboxtest

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// RequireEnv names the environment variable that turns skips into failures:
// a comma-separated list of what this machine must provide, such as
// "namespace,python,docker" (CI sets it, so that a suite that silently
// skipped could not pass there).
const RequireEnv = "SANDBOXKIT_REQUIRE"

// Required reports whether RequireEnv names what ("namespace", "landlock",
// "python", "docker").
func Required(what string) bool {
	return slices.Contains(strings.Split(os.Getenv(RequireEnv), ","), what)
}

// Unavailable ends a test that needs what and cannot have it: it skips with
// the reason, or fails with it when RequireEnv names what.
func Unavailable(t testing.TB, what, reason string) {
	t.Helper()
	if Required(what) {
		t.Fatalf("%s=%s names %s, but: %s", RequireEnv, os.Getenv(RequireEnv), what, reason)
	}
	t.Skipf("no %s here: %s", what, reason)
}

// NewDefault creates a sandbox with the default settings — the namespace
// tier, no network — checks that this is what it got and that python3 is in
// it, and closes it when the test ends. Where the namespace tier or python3
// is missing the test skips, or fails when RequireEnv names what is missing.
func NewDefault(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx)
	if err != nil {
		if sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable {
			Unavailable(t, "namespace", "the default sandbox cannot be created: "+err.Error())
		}
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	info := sb.Info()
	if info.Isolation < sandbox.TierNamespace || info.Network {
		t.Fatalf("the default sandbox has isolation %s, network %v; want at least namespace and no network", info.Isolation, info.Network)
	}
	if !info.PythonAvailable {
		Unavailable(t, "python", "the sandbox has no python3")
	}
	return sb
}
