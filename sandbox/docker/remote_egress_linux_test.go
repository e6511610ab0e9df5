package docker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/proctest"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestCloseEndsAStalledStreamCarryingEgress: with an engine reached over
// TCP there is no handoff socket, so the egress proxy's connections ride
// on the attach stream, each with 1 MiB of credit towards the agent. When
// the agent stops reading (here SIGSTOP from the host; a hostile agent
// can do the same while granting credit), the host's writes fill the
// stream and block. Close must still end the sandbox: it used to run the
// egress proxy's cleanup first, which waited for those blocked writers
// behind the stream it had not closed yet, and Close never returned (the
// container stayed, stopped, until the test binary died).
func TestCloseEndsAStalledStreamCarryingEgress(t *testing.T) {
	host := tcpEndpoint(t)
	d := newTestDriver(t, WithHost(host))
	h := sandboxtest.NewEgressHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	t0 := time.Now()
	sb, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-test"), sandbox.WithEgress(h.EgressPolicy()))
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Logf("sandbox.New over TCP took %v", time.Since(t0).Round(time.Millisecond))
	closed := make(chan error, 1)
	started := false
	t.Cleanup(func() {
		if !started {
			sb.Close()
		}
	})
	if m := sb.Info().Egress.Mechanism; m == "" {
		t.Fatalf("no egress mechanism reported")
	}
	id := sb.Info().Extra["container_id"]
	if id == "" {
		t.Fatal("Info does not name the container")
	}
	// 16 downloads of 10 MB at once: up to 16 MiB of credit in flight,
	// more than the stream's buffers between here and the agent hold.
	url := fmt.Sprintf("http://%s:%d/big", sandboxtest.EgressAllowed, h.HTTPPort)
	script := fmt.Sprintf(`for i in $(seq 16); do (while :; do curl -s -o /dev/null %s; done) & done; wait`, url)
	if _, err := sb.Commands.Start(ctx, sandbox.Command{Args: []string{"sh", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for h.Conns() < 16 {
		if ctx.Err() != nil {
			t.Fatalf("the downloads did not start: %d connections", h.Conns())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("16 downloads under way after %v", time.Since(t0).Round(time.Millisecond))
	ins, err := d.cli.ContainerInspect(ctx, id)
	if err != nil || ins.State == nil || ins.State.Pid <= 0 {
		t.Fatalf("inspect %s: %v", id, err)
	}
	pid := ins.State.Pid
	if cmd := readCmdline(pid); cmd == "" {
		t.Fatalf("no process %d", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP the agent (pid %d): %v", pid, err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	// Let the host fill the stream: the downloads run at over 100 MB/s,
	// so a second is many times what the buffers hold.
	time.Sleep(time.Second)
	started = true
	t0 = time.Now()
	go func() { closed <- sb.Close() }()
	select {
	case <-closed:
		t.Logf("Close returned after %v", time.Since(t0).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		syscall.Kill(pid, syscall.SIGCONT)
		t.Fatal("Close did not return within 60 s of a stalled agent's stream carrying egress")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !inspectGone(t, d, id) {
		if time.Now().After(deadline) {
			t.Fatalf("container %s still exists after Close", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("container gone %v after Close began", time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() { t.Logf("cleanups done %v after Close began", time.Since(t0).Round(time.Millisecond)) })
}

// readCmdline returns /proc/PID/cmdline, "" without the process.
func readCmdline(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return string(b)
}

// stoppableSandbox makes a Docker sandbox and returns it with the host
// pid of its agent (the container's first process), which the stalled-
// agent tests stop with SIGSTOP from the host.
func stoppableSandbox(t *testing.T) (*sandbox.Sandbox, int) {
	t.Helper()
	d := newTestDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-test"))
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	ins, err := d.cli.ContainerInspect(ctx, sb.Info().Extra["container_id"])
	if err != nil || ins.State == nil || ins.State.Pid <= 0 {
		t.Fatalf("inspect: %v", err)
	}
	return sb, ins.State.Pid
}

// TestCallsKeepTheirDeadlinesWhileTheAgentStopsReading runs
// sandboxtest.StalledAgent on a Docker sandbox: the attach connection's
// writes fill and block as the local socketpair's do.
func TestCallsKeepTheirDeadlinesWhileTheAgentStopsReading(t *testing.T) {
	sb, pid := stoppableSandbox(t)
	sandboxtest.StalledAgent(t, sb,
		func() { proctest.Stop(t, pid) },
		func() { syscall.Kill(pid, syscall.SIGCONT) })
}

// TestStalledInputIsNotCutShortInSilence runs sandboxtest.StalledInput on
// a Docker sandbox.
func TestStalledInputIsNotCutShortInSilence(t *testing.T) {
	sb, pid := stoppableSandbox(t)
	sandboxtest.StalledInput(t, sb,
		func() { proctest.Stop(t, pid) },
		func() { syscall.Kill(pid, syscall.SIGCONT) })
}

// TestCloseEndsWhatAStoppedAgentLeft runs sandboxtest.StalledAgentClose on
// a Docker sandbox whose agent is stopped and never resumed.
func TestCloseEndsWhatAStoppedAgentLeft(t *testing.T) {
	sb, pid := stoppableSandbox(t)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	sandboxtest.StalledAgentClose(t, sb, func() { proctest.Stop(t, pid) })
}
