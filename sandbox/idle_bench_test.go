package sandbox_test

import (
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// afterIdle is the pause before each call in the AfterIdle benchmarks:
// longer than the client's reader linger (10 ms) and than the time idle
// vCPUs take to halt, far shorter than a model's turn (seconds), which
// costs the same from here on.
const afterIdle = 50 * time.Millisecond

// BenchmarkAfterIdleRead1KB is BenchmarkFloorRead1KB for a call that comes
// after a pause, as every call of a model does: a 1 KB Files.ReadFile, and
// its floors os.ReadFile and the round trip through cat, each after 50 ms
// of idleness (sandboxtest.CompareAfterIdle). Run it with few iterations:
//
//	go test -run '^$' -bench AfterIdle -benchtime 100x ./sandbox
func BenchmarkAfterIdleRead1KB(b *testing.B) {
	r := newRead1KB(b)
	sandboxtest.CompareAfterIdle(b, afterIdle, func(b *testing.B) func() {
		r.read(b)
		return nil
	}, r.floors(b)...)
}

// BenchmarkAfterIdleCommandRun is BenchmarkFloorCommandRun after a pause:
// `true` in the sandbox against a plain exec of `true`, each after 50 ms
// of idleness.
func BenchmarkAfterIdleCommandRun(b *testing.B) {
	sb := newBenchSandbox(b)
	sandboxtest.CompareAfterIdle(b, afterIdle, runTrueIn(sb), execTrueFloor)
}
