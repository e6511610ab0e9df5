package docker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// The bash sessions' behaviours (package shell's tests run them against a
// host bash) checked where they can break differently: bash runs on a
// pseudo-terminal that the resident agent opens inside the container, and
// keys, output and exit statuses cross the container's attach stream.

func shRun(t *testing.T, sh *sandbox.Shell, cmd string, timeout time.Duration) sandbox.ShellResult {
	t.Helper()
	res, err := sh.Run(context.Background(), cmd, sandbox.ShellRunOptions{Timeout: timeout})
	if err != nil {
		t.Fatalf("Run(%q): %v", cmd, err)
	}
	return res
}

func exitOf(r sandbox.ShellResult) string {
	if r.ExitCode == nil {
		return "none"
	}
	return fmt.Sprint(*r.ExitCode)
}

func TestBashSessionsOnDocker(t *testing.T) {
	sb := newSandbox(t)
	ctx := context.Background()
	sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("cd, variables and functions persist between commands", func(t *testing.T) {
		r := shRun(t, sh, "mkdir -p 'a b' && cd 'a b'; export EXP=e1; plain=p1; greet() { echo \"hi $1\"; }", 10*time.Second)
		if exitOf(r) != "0" || r.Cwd != "/workspace/a b" {
			t.Fatalf("first command: exit %s cwd %q output %q", exitOf(r), r.Cwd, r.Output)
		}
		r = shRun(t, sh, "pwd; echo $EXP $plain $GREETING; greet you", 10*time.Second)
		if r.Output != "/workspace/a b\ne1 p1 hello\nhi you\n" {
			t.Fatalf("second command printed %q", r.Output)
		}
	})
	t.Run("exit status is data and $? carries over", func(t *testing.T) {
		if r := shRun(t, sh, "false", 10*time.Second); exitOf(r) != "1" {
			t.Fatalf("false: exit %s", exitOf(r))
		}
		if r := shRun(t, sh, "echo $?", 10*time.Second); r.Output != "1\n" {
			t.Fatalf("$? printed %q", r.Output)
		}
	})
	t.Run("a running command can be given input and interrupted", func(t *testing.T) {
		r := shRun(t, sh, "read -r line; echo \"got $line\"", 300*time.Millisecond)
		if !r.Running {
			t.Fatalf("read returned without input: %+v", r)
		}
		r, err := sh.Input(ctx, "typed text", sandbox.ShellWaitOptions{Timeout: 10 * time.Second})
		if err != nil || exitOf(r) != "0" || !strings.Contains(r.Output, "got typed text") {
			t.Fatalf("after input: %+v, %v", r, err)
		}
		r = shRun(t, sh, "sleep 30", 300*time.Millisecond)
		if !r.Running {
			t.Fatalf("sleep 30 finished early: %+v", r)
		}
		if _, err := sh.Run(ctx, "echo no", sandbox.ShellRunOptions{Timeout: time.Second}); !errors.Is(err, sandbox.ErrBusy) {
			t.Fatalf("a command while one runs: %v, want %s", err, sandbox.CodeBusy)
		}
		r, err = sh.Input(ctx, "C-c", sandbox.ShellWaitOptions{Timeout: 10 * time.Second})
		if err != nil || exitOf(r) != "130" {
			t.Fatalf("C-c: %+v, %v; want exit 130", r, err)
		}
		if r := shRun(t, sh, "echo still here", 10*time.Second); r.Output != "still here\n" {
			t.Fatalf("after C-c: %q", r.Output)
		}
	})
	t.Run("the session sees the terminal and the sandbox user", func(t *testing.T) {
		r := shRun(t, sh, "[ -t 0 ] && echo tty; id -u; echo $TERM", 10*time.Second)
		if !strings.HasPrefix(r.Output, "tty\n65534\n") {
			t.Fatalf("printed %q, want a terminal and uid 65534", r.Output)
		}
	})
	t.Run("sessions are independent", func(t *testing.T) {
		other, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if r := shRun(t, other, "echo \"[${plain-unset}]\"; pwd", 10*time.Second); r.Output != "[unset]\n/workspace\n" {
			t.Fatalf("a second session printed %q", r.Output)
		}
		if len(sb.Shells.List()) != 2 {
			t.Fatalf("sessions listed: %+v", sb.Shells.List())
		}
	})
	t.Run("exit ends the session with a coded error afterwards", func(t *testing.T) {
		gone, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := shRun(t, gone, "exit 3", 10*time.Second)
		if !r.Ended || exitOf(r) != "3" {
			t.Fatalf("exit 3: %+v", r)
		}
		if _, err := gone.Run(ctx, "echo", sandbox.ShellRunOptions{Timeout: time.Second}); !errors.Is(err, sandbox.ErrEnded) {
			t.Fatalf("run after exit: %v, want %s", err, sandbox.CodeEnded)
		}
	})
}

func TestClosingASessionKillsWhatItStarted(t *testing.T) {
	sb := newSandbox(t)
	ctx := context.Background()
	sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A marker in argv finds these processes; the sandbox's own ps sees
	// every process in the container's pid namespace. A background job
	// (its own process group) and one orphaned at once by its subshell
	// (re-parented to the agent, no longer in the shell's tree); both
	// hold the terminal. A daemon that leaves the session (setsid) is
	// out of a session's reach: the sandbox's Close ends it (see the
	// escape suite's SetsidDaemon probe).
	marker := fmt.Sprintf("1000.%09d", rand.IntN(1e9))
	shRun(t, sh, "sleep "+marker+" & (sleep "+marker+" &)", 10*time.Second)
	count := func() int {
		res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "ps -eo args | grep -c '^sleep " + marker + "' || true"})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		fmt.Sscan(res.Stdout, &n)
		return n
	}
	if n := count(); n != 2 {
		t.Fatalf("%d marked sleeps running before Close, want 2", n)
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() != 0 {
		if time.Now().After(deadline) {
			res, _ := sb.Commands.Run(ctx, sandbox.Command{Shell: "ps -eo pid,ppid,pgid,sid,stat,args"})
			t.Fatalf("processes started by the session survive its Close:\n%s", res.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
