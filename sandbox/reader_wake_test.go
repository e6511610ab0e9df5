//go:build linux

package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// TestLongCallDoesNotWakeTheHost: a call that waits long (Job.Wait on a
// job that runs 2 s) reads its own reply; while it waits, nothing else of
// the client may keep waking up. The first version of "a call reads its
// own reply" re-armed the background reader's 10 ms timer for as long as
// the call waited: about 100 wake-ups of the host a second per sandbox
// (found in review: 293 in a 3 s Job.Wait). The host's context switches
// across the wait are compared with the same time spent idle, in the same
// run.
func TestLongCallDoesNotWakeTheHost(t *testing.T) {
	sb, err := sandbox.New(context.Background(), sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := context.Background()
	const d = 2 * time.Second
	idle0 := selfCost()
	time.Sleep(d)
	idle1 := selfCost()
	job, err := sb.Commands.Start(ctx, sandbox.Command{Args: []string{"sleep", "2"}})
	if err != nil {
		t.Fatal(err)
	}
	w0 := selfCost()
	st, err := job.Wait(ctx)
	w1 := selfCost()
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("Job.Wait: %+v %v", st, err)
	}
	idle, wait := idle1.csw-idle0.csw, w1.csw-w0.csw
	t.Logf("host context switches: %d across a %v Job.Wait, %d across %v idle", wait, d, idle, d)
	// A few for the call itself and the runtime; a timer every 10 ms is
	// ~200.
	if wait > idle+50 {
		t.Errorf("the host switched %d times across a %v Job.Wait (%d idle): something wakes it all along the wait", wait, d, idle)
	}
}
