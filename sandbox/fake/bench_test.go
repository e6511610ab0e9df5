package fake_test

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/fake"
)

// BenchmarkCommand compares one Commands.Run on the fake with the same
// call on the local backend (the floor a test without the fake pays), so
// the speed-up of an offline test is measured in the same run.
func BenchmarkCommand(b *testing.B) {
	ctx := context.Background()
	cmd := sandbox.Command{Shell: "echo hi"}
	b.Run("fake", func(b *testing.B) {
		sb, fk := fake.New(b)
		fk.Script.Command(fake.Exact("echo hi"), fake.Reply{Stdout: "hi\n"})
		for b.Loop() {
			if _, err := sb.Commands.Run(ctx, cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("local", func(b *testing.B) {
		sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
		if err != nil {
			b.Skipf("no local sandbox: %v", err)
		}
		defer sb.Close()
		for b.Loop() {
			if _, err := sb.Commands.Run(ctx, cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkNew compares creating a fake sandbox with creating a local one.
func BenchmarkNew(b *testing.B) {
	b.Run("fake", func(b *testing.B) {
		for b.Loop() {
			sb, _ := fake.New(b)
			sb.Close()
		}
	})
	b.Run("local", func(b *testing.B) {
		for b.Loop() {
			sb, err := sandbox.New(context.Background(), sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
			if err != nil {
				b.Skipf("no local sandbox: %v", err)
			}
			sb.Close()
		}
	})
}
