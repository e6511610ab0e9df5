//go:build linux

package local_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

// helperEnv turns this test binary into sigkillHelper (see TestMain).
const helperEnv = "SANDBOXKIT_TEST_SIGKILL_HELPER"

// sigkillHelper is the host program that gets killed: it creates a
// sandbox (at the tier named in its argument, "" for the best), starts
// processes in it that try to outlive it (a job, a background child, a
// setsid daemon), says READY and waits to be killed.
func sigkillHelper(arg string) int {
	if ws, ok := strings.CutPrefix(arg, "workspace:"); ok {
		return workspaceHelper(ws)
	}
	marker, tier, _ := strings.Cut(arg, ",")
	opts := []sandbox.Option{sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)}
	if tier == "landlock" {
		opts = append(opts, sandbox.WithDriver(local.New(local.WithTier(sandbox.TierLandlock))))
	}
	ctx := context.Background()
	sb, err := sandbox.New(ctx, opts...)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	sleep := "sleep " + marker
	if _, err := sb.Commands.Start(ctx, sandbox.Command{Shell: sleep + " & setsid " + sleep + " & " + sleep}); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	for len(marked(marker)) < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("READY", sb.Info().Isolation, strings.Join(sb.Info().Gaps, "; "))
	select {}
}

// marked lists the live processes whose command line has marker.
func marked(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(raw, []byte(marker)) {
			out = append(out, pid)
		}
	}
	return out
}

// TestHostSIGKILLLeavesNoSandboxProcess kills the host program with
// SIGKILL (no Close, no deferred cleanup runs) and checks that no process
// of its sandbox survives: not the agent, not a job, not a setsid daemon.
func TestHostSIGKILLLeavesNoSandboxProcess(t *testing.T) {
	for _, tier := range []string{"best", "landlock"} {
		t.Run(tier, func(t *testing.T) {
			marker := fmt.Sprintf("1000.%09d", rand.IntN(1e9))
			arg := marker
			if tier == "landlock" {
				arg += ",landlock"
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+arg)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 1)
			go func() {
				l, _ := bufio.NewReader(out).ReadString('\n')
				lines <- strings.TrimSpace(l)
			}()
			var ready string
			select {
			case ready = <-lines:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("the helper did not start its sandbox within 60 s")
			}
			if !strings.HasPrefix(ready, "READY") {
				cmd.Process.Kill()
				cmd.Wait()
				if tier == "landlock" && strings.Contains(ready, "SBX_ISOLATION_UNAVAILABLE") {
					t.Skipf("no landlock tier here: %s", ready)
				}
				t.Fatalf("helper: %s", ready)
			}
			if tier == "landlock" && strings.Contains(ready, "SIGKILL") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Skipf("the landlock tier here admits this gap: %s", ready)
			}
			t.Log(ready)
			if n := len(marked(marker)); n < 3 {
				t.Fatalf("only %d of the sandbox's marked processes run before the kill", n)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			deadline := time.Now().Add(10 * time.Second)
			for {
				left := marked(marker)
				if len(left) == 0 {
					return
				}
				if time.Now().After(deadline) {
					for _, pid := range left {
						syscall.Kill(pid, syscall.SIGKILL)
					}
					t.Fatalf("processes %v of the sandbox survived the SIGKILL of the host program", left)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestCloseDoesNotWaitForAStoppedAgent: Close gives a running agent a
// grace period (3 s) to end itself once its stream closes; a stopped one
// (SIGSTOP) cannot, and Close used to wait the whole period before it
// killed it — a Pool.Get that closes such a sandbox waited with it (found
// in review: Get took 3.0 s). The bound is the grace period itself.
func TestCloseDoesNotWaitForAStoppedAgent(t *testing.T) {
	sb, err := sandbox.New(context.Background(), sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(sb.Info().Extra["agent_pid"])
	if err != nil {
		sb.Close()
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		sb.Close()
		t.Fatal(err)
	}
	start := time.Now()
	sb.Close()
	if d := time.Since(start); d >= 3*time.Second {
		t.Errorf("Close of a sandbox whose agent is stopped took %v: it waited out the grace period for an agent that cannot end itself", d)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the stopped agent (pid %d) outlived Close", pid)
	}
}
