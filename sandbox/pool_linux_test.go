//go:build linux

package sandbox_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// TestPoolSkipsAStoppedAgent: an agent stopped by SIGSTOP (anything on
// the host may send it) is alive but answers nothing. Get must not hand
// its sandbox over: on the old code the caller's first command hung
// until its deadline.
func TestPoolSkipsAStoppedAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := map[int]bool{}
	for _, pid := range agentProcs(t) {
		before[pid] = true
	}
	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: 1}, poolOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var stopped []int
	eventuallyTrue(t, "the pool's first sandbox to start", func() bool {
		stopped = stopped[:0]
		for _, pid := range agentProcs(t) {
			if !before[pid] {
				stopped = append(stopped, pid)
			}
		}
		return len(stopped) >= 1
	})
	time.Sleep(200 * time.Millisecond)
	for _, pid := range stopped {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever happens, nothing stays stopped after the test.
	defer func() {
		for _, pid := range stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	sb, err := pool.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	res, err := sb.Commands.Run(rctx, sandbox.Command{Shell: "echo alive"})
	if err != nil || strings.TrimSpace(res.Stdout) != "alive" {
		t.Fatalf("the sandbox Get returned while the pooled agent was stopped: %v %+v", err, res)
	}
}
