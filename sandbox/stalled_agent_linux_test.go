package sandbox_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/proctest"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// stoppableSandbox makes a local sandbox and returns it with its agent's
// pid, which the stalled-agent tests stop with SIGSTOP.
func stoppableSandbox(t *testing.T) (*sandbox.Sandbox, int) {
	t.Helper()
	sb, err := sandbox.New(context.Background(), sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	pid, err := strconv.Atoi(sb.Info().Extra["agent_pid"])
	if err != nil {
		t.Skipf("the backend does not name its agent's process: %v", err)
	}
	return sb, pid
}

// TestCallsKeepTheirDeadlinesWhileTheAgentStopsReading runs
// sandboxtest.StalledAgent on the local backend, stopping the agent with
// SIGSTOP. On the old client the 8 MB Files.Write with a 2 s deadline had
// not returned after 30 s.
func TestCallsKeepTheirDeadlinesWhileTheAgentStopsReading(t *testing.T) {
	sb, pid := stoppableSandbox(t)
	sandboxtest.StalledAgent(t, sb,
		func() { proctest.Stop(t, pid) },
		func() { syscall.Kill(pid, syscall.SIGCONT) })
}

// TestCloseEndsWhatAStoppedAgentLeft runs sandboxtest.StalledAgentClose on
// the local backend: Close on a stopped agent (SIGSTOP, never resumed)
// after a Python context and a bash session were given up.
func TestCloseEndsWhatAStoppedAgentLeft(t *testing.T) {
	sb, pid := stoppableSandbox(t)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	sandboxtest.StalledAgentClose(t, sb, func() { proctest.Stop(t, pid) })
}

// TestStalledInputIsNotCutShortInSilence runs sandboxtest.StalledInput on
// the local backend: Run reported success with 1000 of 2000 bytes when
// input the stream could not take was dropped.
func TestStalledInputIsNotCutShortInSilence(t *testing.T) {
	sb, pid := stoppableSandbox(t)
	sandboxtest.StalledInput(t, sb,
		func() { proctest.Stop(t, pid) },
		func() { syscall.Kill(pid, syscall.SIGCONT) })
}
