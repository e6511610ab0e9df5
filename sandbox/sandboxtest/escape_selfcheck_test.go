package sandboxtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

func TestEscapeSelfcheckProcessTier(t *testing.T) {
	sandboxtest.RunEscape(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.AllowWeaker(sandbox.TierProcess)}, opts...)...)
		if err != nil {
			t.Fatalf("sandbox.New: %v", err)
		}
		return sb
	})
}
