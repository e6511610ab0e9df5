package main

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

func TestClosedWorldFollowsTheTierInForce(t *testing.T) {
	// openWorldHint false is a promise to the client: it must hold only
	// where the sandbox's network is really blocked. The process tier
	// shares the host's network; the namespace tier has none.
	ctx := context.Background()
	process := []sandbox.Option{sandbox.WithDriver(local.New(local.WithTier(sandbox.TierProcess))), sandbox.AllowWeaker(sandbox.TierProcess)}
	if closedWorld(ctx, process) {
		t.Errorf("a process-tier sandbox is called a closed world")
	}
	if len(isolationFlags(t)) == 0 {
		if !closedWorld(ctx, nil) {
			t.Errorf("a strict sandbox (namespace tier or stronger) is not called a closed world")
		}
	}
	// Unknown (the sandbox cannot be made) claims nothing.
	if closedWorld(ctx, []sandbox.Option{sandbox.WithWorkspace("/no/such/dir")}) {
		t.Errorf("closedWorld claims a closed world for a sandbox it could not create")
	}
}
