//go:build linux

package local_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

// TestStartsRefusedWhileTheCommandsCgroupIsFull: while a fork bomb holds
// the commands' pids cgroup full, new commands are refused as a fork at
// the limit is (EAGAIN), and the cgroup never holds more than the limit;
// the sandbox serves again once the bomb is killed. Commands used to be
// born in the cgroup (forked by a thread of the agent inside it), where
// the kernel refused the fork; now each command's child moves itself in
// before execve, a move the pids controller never refuses, so the child
// must check the count itself (linuxrunner's joinCgroup). Without that
// check each of these starts ran, one over the limit apiece, and their
// processes counted against the agent's reserve in the parent cgroup.
func TestStartsRefusedWhileTheCommandsCgroupIsFull(t *testing.T) {
	const pids = 16
	for _, tier := range []sandbox.Tier{sandbox.TierNamespace, sandbox.TierLandlock} {
		t.Run(tier.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := sandbox.New(ctx, sandbox.WithDriver(local.New(local.WithTier(tier))), sandbox.AllowWeaker(tier),
				sandbox.WithLimits(sandbox.Limits{Pids: pids}))
			if err != nil {
				t.Skipf("the %s tier is not available here: %v", tier, err)
			}
			defer sb.Close()
			current := commandsPidsCurrent(t, sb)
			if current == "" {
				t.Skip("this sandbox has no commands cgroup (cgroup v1 pids, writable, is needed)")
			}
			count := func() int {
				b, err := os.ReadFile(current)
				if err != nil {
					t.Fatal(err)
				}
				n, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			// bash retries a refused fork, and every sleep holds its
			// task: the cgroup stays full until the job is killed.
			bomb, err := sb.Commands.Start(ctx, sandbox.Command{Args: []string{"bash", "-c", "while :; do sleep 1000 & done"}})
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(60 * time.Second)
			for count() < pids {
				if time.Now().After(deadline) {
					t.Fatalf("the bomb filled the commands cgroup to %d of %d only", count(), pids)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for i := range 5 {
				if job, err := sb.Commands.Start(ctx, sandbox.Command{Args: []string{"sleep", "1000"}}); err == nil {
					t.Errorf("start %d: a job started while the commands cgroup was full (job %s)", i, job.ID)
				}
				if res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err == nil {
					t.Errorf("run %d: a command ran while the commands cgroup was full: %+v", i, res)
				} else if sandbox.CodeOf(err) != sandbox.CodeBusy || !strings.Contains(err.Error(), "resource temporarily unavailable") || !strings.Contains(err.Error(), fmt.Sprintf("process limit (%d)", pids)) || !strings.Contains(err.Error(), "stop_background") {
					t.Errorf("run %d: refused with %q, want SBX_BUSY naming the process limit (%d), the refused fork's EAGAIN, and what to do (stop_background)", i, err, pids)
				} else if i == 0 {
					t.Logf("refused as it should be: %v", err)
				}
			}
			if n := count(); n > pids {
				t.Errorf("the commands cgroup holds %d tasks with a limit of %d", n, pids)
			} else {
				t.Logf("the commands cgroup holds %d tasks with a limit of %d", n, pids)
			}
			if err := bomb.Signal(ctx, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if _, err := bomb.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			for {
				res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"echo", "usable"}})
				if err == nil && strings.TrimSpace(string(res.Stdout)) == "usable" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the sandbox does not serve after the bomb was killed: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// commandsPidsCurrent is the host path of the pids.current of sb's
// commands cgroup (a child of the agent's v1 pids cgroup), "" if there is
// none.
func commandsPidsCurrent(t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	pid := sb.Info().Extra["agent_pid"]
	f, err := os.Open("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "8:pids:/sandboxkit-..."
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && parts[1] == "pids" {
			p := filepath.Join("/sys/fs/cgroup/pids", parts[2], "commands", "pids.current")
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}
