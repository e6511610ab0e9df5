package sandbox_test

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// BenchmarkPoolGetAndFirstCommand: Pool.Get + a first command vs a cold
// sandbox.New + the same command, in the same run (issue 22's target:
// pooled local <= 2 ms). The pool's replacements start in the background
// during the measurement, as they would for a real caller; Close runs
// outside the measured time.
//
//	go test -run '^$' -bench PoolGet -benchtime 100x ./sandbox
func BenchmarkPoolGetAndFirstCommand(b *testing.B) {
	ctx := context.Background()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: 4}, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	first := func(b *testing.B, sb *sandbox.Sandbox) func() {
		if _, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		return func() { sb.Close() }
	}
	warm, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		b.Fatal(err)
	}
	defer warm.Close()
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		sb, err := pool.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return first(b, sb)
	}, sandboxtest.Floor{Name: "cold", Run: func(b *testing.B) func() {
		sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
		if err != nil {
			b.Fatal(err)
		}
		return first(b, sb)
	}}, sandboxtest.Floor{Name: "warm", Run: func(b *testing.B) func() {
		// The lower bound: the same command in a sandbox already held.
		if _, err := warm.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		return nil
	}})
}
