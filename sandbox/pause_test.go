package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// withoutPause is a backend that cannot pause: the local backend with only
// the mandatory Instance methods (embedding the interface hides the
// instance's Pause and Resume), as a third-party backend without a freezer
// would be.
type withoutPause struct{ driver.Driver }

func (d withoutPause) Start(ctx context.Context, cfg driver.Config) (driver.Instance, error) {
	inst, err := d.Driver.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return struct{ driver.Instance }{inst}, nil
}

// TestPauseOnABackendThatCannotPause: pausing is optional for a backend;
// where it is missing, Pause and Resume fail with SBX_UNSUPPORTED instead of
// reporting a pause that did not happen, and the sandbox goes on running
// and serving calls.
func TestPauseOnABackendThatCannotPause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.WithDriver(withoutPause{local.New()}))
	if err != nil {
		if sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable {
			sandboxtest.Unavailable(t, "namespace", "the default sandbox cannot be created: "+err.Error())
		}
		t.Fatal(err)
	}
	defer sb.Close()
	if _, err := sb.Commands.Start(ctx, sandbox.Command{Shell: `while :; do echo tick >> ticks; sleep 0.01; done`}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		data, err := sb.Files.ReadFile(ctx, "ticks")
		if err != nil && sandbox.CodeOf(err) != sandbox.CodeNotFound {
			t.Fatalf("ReadFile: %v (the sandbox must go on serving calls)", err)
		}
		return strings.Count(string(data), "tick")
	}
	waitMore := func(than int, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for count() <= than {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitMore(0, "the job never ticked")
	err = sb.Pause(ctx)
	if sandbox.CodeOf(err) != sandbox.CodeUnsupported || !strings.Contains(err.Error(), "cannot pause") {
		t.Fatalf("Pause on a backend without driver.Pauser = %v; want SBX_UNSUPPORTED saying it cannot pause", err)
	}
	if sb.Info().Paused {
		t.Error("Info().Paused is true after a Pause that failed")
	}
	waitMore(count(), "the job stopped ticking after the failed Pause: the sandbox must keep running")
	if err := sb.Resume(ctx); sandbox.CodeOf(err) != sandbox.CodeUnsupported {
		t.Errorf("Resume on a backend without driver.Pauser = %v; want SBX_UNSUPPORTED", err)
	}
	if r, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Errorf("Run after the failed Pause = %+v, %v", r, err)
	}
}
