package server

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// procsProbeEnv makes this test binary report the GOMAXPROCS a search gets
// in an agent started the way a local sandbox starts it (GOMAXPROCS=1 in
// its environment, then NarrowProcs).
const procsProbeEnv = "SANDBOXKIT_AGENT_TEST_PROCS"

func init() {
	if os.Getenv(procsProbeEnv) != "1" {
		return
	}
	NarrowProcs()
	narrow := runtime.GOMAXPROCS(0)
	workers, restore := widenProcs()
	wide := runtime.GOMAXPROCS(0)
	restore()
	fmt.Printf("%d %d %d %d\n", narrow, wide, workers, runtime.GOMAXPROCS(0))
	os.Exit(0)
}

// A local agent starts with GOMAXPROCS=1 in its environment, and the
// search widened the scheduler back to the value it found there: 1. Every
// search in a sandbox ran on one core (1.9x ripgrep's time over the Go
// tree on two cores, its CPU time equal to its wall time).
func TestSearchWidensAnAgentStartedOnOneP(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: there is nothing to widen to")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^$")
	cmd.Env = append(os.Environ(), procsProbeEnv+"=1", "GOMAXPROCS=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	var narrow, wide, workers, after int
	if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &narrow, &wide, &workers, &after); err != nil {
		t.Fatalf("probe said %q: %v", out, err)
	}
	if narrow != 1 || after != 1 {
		t.Errorf("GOMAXPROCS outside a search: %d before, %d after; want 1", narrow, after)
	}
	if workers < 2 {
		t.Errorf("a search in an agent started with GOMAXPROCS=1 runs %d workers on a %d-CPU machine; want the runtime's default GOMAXPROCS (more than 1)", workers, runtime.NumCPU())
	}
	if wide != workers+1 {
		t.Errorf("a search with %d workers runs with GOMAXPROCS %d; want one P more, for the walk and the agent's other requests", workers, wide)
	}
}
