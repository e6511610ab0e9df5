//go:build linux

package sandbox

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPoolSkipsAStoppedAgent: an agent stopped by SIGSTOP (anything on
// the host may send it) is alive but answers nothing. Get must not hand
// its sandbox over: on the old code the caller's first command hung
// until its deadline (SBX_TIMEOUT).
//
// The stopped agent is the pooled sandbox's own, read from the pool while
// its lock keeps the fill from seeing the place empty; it is this
// process's child, not reaped before it exits, so its pid cannot name
// another process meanwhile.
func TestPoolSkipsAStoppedAgent(t *testing.T) {
	p, ctx := newTestPool(t, "starts two sandboxes")
	for len(p.ready) < 1 {
		if ctx.Err() != nil {
			t.Fatal("timed out waiting for the pool's sandbox")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.mu.Lock()
	ps := <-p.ready
	pidText := ps.sb.Info().Extra["agent_pid"]
	p.ready <- ps
	p.mu.Unlock()
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		t.Skipf("the backend does not name its agent's process (%q)", pidText)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT) // whatever happens, nothing stays stopped
	// The stop completes after kill returns (a thread takes the signal,
	// then every thread stops): wait until the agent shows it, as a stop
	// sent any time before a Get would.
	for {
		b, err := os.ReadFile("/proc/" + pidText + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "T") {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the agent never showed as stopped")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	sb, err := p.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	t.Logf("Get took %v with the pooled agent stopped", time.Since(start))
	if got := sb.Info().Extra["agent_pid"]; got == pidText {
		t.Fatalf("Get handed over the sandbox whose agent (pid %s) is stopped", pidText)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	res, err := sb.Commands.Run(rctx, Command{Shell: "echo alive"})
	if err != nil || strings.TrimSpace(res.Stdout) != "alive" {
		t.Fatalf("the sandbox Get returned: %v %+v", err, res)
	}
}
