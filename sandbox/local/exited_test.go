//go:build linux

package local_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

// TestExitedSeesTheAgentDie: the instance's kernel-side probe
// (driver.Prober, what Pool.Get asks instead of pinging the agent) says
// "alive" while the agent runs and "exited" from the moment it is killed,
// on every tier this machine has.
func TestExitedSeesTheAgentDie(t *testing.T) {
	for _, tier := range []driver.Tier{driver.TierNamespace, driver.TierLandlock, driver.TierProcess} {
		t.Run(tier.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			inst, err := local.New(local.WithTier(tier)).Start(ctx, driver.Config{
				ID: fmt.Sprintf("exited-%d", time.Now().UnixNano()), AllowWeaker: []driver.Tier{driver.TierLandlock, driver.TierProcess},
			})
			if err != nil {
				t.Skipf("the %s tier is not available here: %v", tier, err)
			}
			defer inst.Close(context.Background())
			pr, ok := inst.(driver.Prober)
			if !ok {
				t.Fatal("the local instance does not implement driver.Prober")
			}
			if pr.Exited() {
				t.Fatal("Exited reports a running agent as exited")
			}
			pid, err := strconv.Atoi(inst.Isolation().Extra["agent_pid"])
			if err != nil {
				t.Fatal(err)
			}
			p, _ := os.FindProcess(pid)
			p.Kill()
			// No waiting: from the moment kill returns, the agent never
			// runs its own code again, and Exited must say so.
			if !pr.Exited() {
				t.Fatal("Exited reports an agent killed with SIGKILL as alive")
			}
			deadline := time.Now().Add(30 * time.Second)
			for !procExited(pid) {
				if time.Now().After(deadline) {
					t.Fatalf("agent %d did not exit after SIGKILL", pid)
				}
				time.Sleep(time.Millisecond)
			}
			if !pr.Exited() {
				t.Fatal("Exited reports an agent that has exited as alive")
			}
		})
	}
}

// procExited reports whether pid is a zombie or gone.
func procExited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}
