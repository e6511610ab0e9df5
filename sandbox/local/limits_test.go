//go:build linux

package local_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestLimitsOnWeakerTiers runs the contract's per-process limits on the
// landlock and process tiers, which enforce them differently from the
// namespace tier TestContract runs on: the landlock tier sets
// RLIMIT_NOFILE on the agent, the process tier has the agent set it on
// each command (Control.SetByAgent).
func TestLimitsOnWeakerTiers(t *testing.T) {
	for _, tier := range []sandbox.Tier{sandbox.TierLandlock, sandbox.TierProcess} {
		t.Run(tier.String(), func(t *testing.T) {
			sandboxtest.RunContract(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
				if !strings.Contains(t.Name(), "/Limits/OpenFiles") && !strings.Contains(t.Name(), "/Limits/FileSize") {
					t.Skip("this test runs only the per-process limits of the contract on the " + tier.String() + " tier; TestContract runs the whole suite")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.WithDriver(local.New(local.WithTier(tier))), sandbox.AllowWeaker(tier)}, opts...)...)
				if err != nil {
					if sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable && tier == sandbox.TierLandlock {
						sandboxtest.Unavailable(t, "landlock", err.Error())
					}
					t.Fatalf("sandbox.New on the %s tier: %v", tier, err)
				}
				return sb
			})
		})
	}
}
