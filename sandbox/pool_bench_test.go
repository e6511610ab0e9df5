package sandbox_test

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// BenchmarkPoolGetAndFirstCommand: Pool.Get + a first command vs a cold
// sandbox.New + the same command, and vs that command in a sandbox already
// held, in the same run (issue 22's target: pooled local <= 2 ms; see
// sandboxtest.ComparePoolGet).
//
//	go test -run '^$' -bench PoolGet -benchtime 100x ./sandbox
func BenchmarkPoolGetAndFirstCommand(b *testing.B) {
	sandboxtest.ComparePoolGet(b, sandbox.PoolConfig{Size: 4}, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
}
