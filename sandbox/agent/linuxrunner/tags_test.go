//go:build linux

// These tests run a whole agent (package agent/server) with this runner,
// so they are an external test package.

package linuxrunner_test

import (
	"github.com/sandboxkit/sandboxkit/sandbox/agent/linuxrunner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/server"

	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// benchAgent serves an agent with the Linux runner over a socketpair for
// a benchmark or test.
func benchAgent(b testing.TB) *agent.Client {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	// FileConn dups the descriptor: the originals are closed, or closing
	// the client would not end the agent's stream.
	fa, fc := os.NewFile(uintptr(fds[0]), "agent"), os.NewFile(uintptr(fds[1]), "client")
	a, _ := net.FileConn(fa)
	cc, _ := net.FileConn(fc)
	fa.Close()
	fc.Close()
	served := make(chan error, 1)
	go func() { served <- server.Serve(a, server.ServeOptions{Runner: linuxrunner.New(linuxrunner.Options{})}) }()
	c, err := agent.Dial(context.Background(), cc, wire.Hello{Workspace: b.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		b.Fatal(err)
	}
	// Wait for the agent's shutdown: it kills every descendant of this
	// process, which would include the next benchmark's commands.
	b.Cleanup(func() { c.Close(); <-served })
	return c
}

func benchRun(b testing.TB, c *agent.Client, req wire.ExecRequest) wire.ExecReply {
	call, err := c.Start("exec", req, agent.Handlers{})
	if err != nil {
		b.Fatal(err)
	}
	raw, err := call.Wait()
	if err != nil {
		b.Fatal(err)
	}
	var rep wire.ExecReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		b.Fatal(err)
	}
	return rep
}

// BenchmarkCommandTag measures what tagging (tags.go) costs: a command
// ("true" through the agent, the floor every command pays), the tag itself
// (the one setrlimit each start adds: the only per-command difference to
// the untagged agent), the /proc scan a kill adds, and a whole timeout
// that ends a command and three daemons that left its tree.
func BenchmarkCommandTag(b *testing.B) {
	if linuxrunner.TagsOff() {
		b.Skip("RLIMIT_RTTIME's hard limit is below the tags here")
	}
	b.Run("command-true", func(b *testing.B) {
		c := benchAgent(b)
		for b.Loop() {
			benchRun(b, c, wire.ExecRequest{Args: []string{"true"}})
		}
	})
	b.Run("tag-per-command", func(b *testing.B) {
		arm := linuxrunner.NewTaggerArm()
		for b.Loop() {
			if arm() == 0 {
				b.Fatal("arm failed")
			}
		}
	})
	b.Run("scan-per-kill", func(b *testing.B) {
		for b.Loop() {
			linuxrunner.Tagged(linuxrunner.TagBase)
		}
	})
	b.Run("timeout-kills-3-daemons", func(b *testing.B) {
		c := benchAgent(b)
		script := "setsid sh -c 'sleep 100 &'; sh -c 'sleep 100 >/dev/null 2>&1 &'; (setsid sleep 100 &); sleep 100"
		for b.Loop() {
			rep := benchRun(b, c, wire.ExecRequest{Args: []string{"sh", "-c", script}, TimeoutMs: 50})
			if !rep.TimedOut || len(rep.Survivors) > 0 {
				b.Fatalf("reply %+v", rep)
			}
		}
	})
}

// TestTagSurvivesSetsidAndDoubleFork: the processes a command leaves
// behind through setsid and a double fork carry its tag, and only its.
func TestTagSurvivesSetsidAndDoubleFork(t *testing.T) {
	if linuxrunner.TagsOff() {
		t.Skip("RLIMIT_RTTIME's hard limit is below the tags here")
	}
	c := benchAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rep wire.ExecReply
	err := c.Do(ctx, "exec", wire.ExecRequest{Job: true, Args: []string{"sh", "-c", "setsid sh -c 'sleep 77.5 &'; (setsid sleep 77.5 &); echo started"}}, &rep)
	if err != nil {
		t.Fatal(err)
	}
	var st wire.JobStatus
	if err := c.Do(ctx, "job.wait", wire.JobRef{ID: rep.JobID}, &st); err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	found := 0
	for _, pid := range linuxrunner.Descendants(os.Getpid()) {
		if unix.Prlimit(pid, unix.RLIMIT_RTTIME, nil, &lim) == nil && lim.Cur >= linuxrunner.TagBase && linuxrunner.Alive(pid) {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("%d tagged processes below the agent, want the 2 daemons", found)
	}
	if err := c.Do(ctx, "job.kill", wire.JobSignalRequest{ID: rep.JobID, Signal: int(syscall.SIGKILL)}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for _, pid := range linuxrunner.Descendants(os.Getpid()) {
			if linuxrunner.Alive(pid) {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d daemons survived the job's kill", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMain serves an agent on standard input and output when the tests
// start this binary as a second agent process (childAgent).
func TestMain(m *testing.M) {
	if os.Getenv("LINUXRUNNER_TEST_AGENT") == "1" {
		os.Exit(server.ServeStdio("test agent"))
	}
	os.Exit(m.Run())
}

// childAgent starts this test binary as an agent process of its own (each
// agent reaps with wait4(-1), so two agents cannot share one process) and
// returns its client and pid.
func childAgent(t *testing.T) (*agent.Client, int) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fa, fc := os.NewFile(uintptr(fds[0]), "agent"), os.NewFile(uintptr(fds[1]), "client")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LINUXRUNNER_TEST_AGENT=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = fa, fa, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fa.Close()
	cc, _ := net.FileConn(fc)
	fc.Close()
	c, err := agent.Dial(context.Background(), cc, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return c, cmd.Process.Pid
}

// TestTagsOfTwoAgentsNeverMeet: agents that share a PID namespace (the
// landlock and process tiers, several sandboxes of one host process) must
// not share tags, or one agent's timeout kills the other's commands. Every
// agent used to count its tags up from the same base and kept the last
// one on itself: the second agent's first command timing out SIGKILLed the
// first agent's job (and any agent carrying that tag), found while the
// fake sandbox's tests ran beside other suites.
func TestTagsOfTwoAgentsNeverMeet(t *testing.T) {
	if linuxrunner.TagsOff() {
		t.Skip("RLIMIT_RTTIME's hard limit is below the tags here")
	}
	a, apid := childAgent(t)
	b := benchAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var job wire.ExecReply
	if err := a.Do(ctx, "exec", wire.ExecRequest{Job: true, Args: []string{"sleep", "60"}}, &job); err != nil {
		t.Fatal(err)
	}
	var self unix.Rlimit
	if err := unix.Prlimit(apid, unix.RLIMIT_RTTIME, nil, &self); err != nil {
		t.Fatal(err)
	}
	if self.Cur >= linuxrunner.TagBase && self.Cur != unix.RLIM_INFINITY {
		t.Errorf("the agent carries a tag itself after a start (RTTIME soft limit %d): another agent's kill would reach it", self.Cur)
	}
	rep := benchRun(t, b, wire.ExecRequest{Args: []string{"sleep", "60"}, TimeoutMs: 100})
	if !rep.TimedOut {
		t.Fatalf("agent b's command did not time out: %+v", rep)
	}
	var st wire.JobStatus
	if err := a.Do(ctx, "job.status", wire.JobRef{ID: job.JobID}, &st); err != nil {
		t.Fatal(err)
	}
	if !st.Running {
		t.Fatalf("agent a's job ended when agent b's command timed out: %+v", st)
	}
}
