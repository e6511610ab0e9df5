//go:build linux

package sandbox_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// BenchmarkCommandRunCost: what a warm Commands.Run("true") costs the
// machine, beside BenchmarkFloorCommandRun's wall time — the CPU time and
// context switches per command of this process (the host) and of the
// sandbox's agent, and for the floor, exec.Command("true").Run(), this
// process's (peer: none). The command's own process is counted on
// neither side. Load moves these far less than wall time:
//
//	go test -run '^$' -bench CommandRunCost -benchtime 5000x ./sandbox
func BenchmarkCommandRunCost(b *testing.B) {
	ctx := context.Background()
	b.Run("sandbox", func(b *testing.B) {
		sb := newBenchSandbox(b)
		pid := benchAgentPID(b, sb)
		measureCost(b, pid, func() {
			if _, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("exec", func(b *testing.B) {
		measureCost(b, 0, func() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		})
	})
}
