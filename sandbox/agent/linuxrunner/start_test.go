//go:build linux

package linuxrunner_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/linuxrunner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/server"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// agentWith serves an agent with a runner made with opts over a
// socketpair; hello's workspace is a fresh directory, returned too.
func agentWith(t *testing.T, opts linuxrunner.Options, hello wire.Hello) (*agent.Client, string) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fa, fc := os.NewFile(uintptr(fds[0]), "agent"), os.NewFile(uintptr(fds[1]), "client")
	a, _ := net.FileConn(fa)
	cc, _ := net.FileConn(fc)
	fa.Close()
	fc.Close()
	served := make(chan error, 1)
	go func() { served <- server.Serve(a, server.ServeOptions{Runner: linuxrunner.New(opts)}) }()
	hello.Workspace = t.TempDir()
	if hello.Env == nil {
		hello.Env = []string{"PATH=/usr/bin:/bin"}
	}
	c, err := agent.Dial(context.Background(), cc, hello)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); <-served })
	return c, hello.Workspace
}

// skipWithoutClone skips a test of what only the runner's own clone
// (start_clone.go, amd64) does: elsewhere os/exec starts the command and
// its limits land after it runs.
func skipWithoutClone(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the runner's own clone is amd64 only; here rlimits are set after the start (start_exec.go)")
	}
}

// TestRlimitsReachADoubleForkedOrphan: a command's rlimits are in force
// before it runs, so a child it double-forks at once (its parent exits, so
// it leaves the command's tree) is limited too. They used to be set with
// prlimit once the command ran, and its children found through
// /proc/PID/task/PID/children: an orphan re-parented before that walk
// kept running with no CPU limit at all. The Spawn hook stands for a busy
// agent: it returns only once the orphan exists and has left the tree
// (on the old code: "the orphan's RLIMIT_CPU is {Cur:inf Max:inf}").
func TestRlimitsReachADoubleForkedOrphan(t *testing.T) {
	skipWithoutClone(t)
	var ws string
	busy := func(start func() error) error {
		err := start()
		if err != nil {
			return err
		}
		// Hold the start until the orphan wrote its pid and its parent
		// (the subshell) is gone.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(ws, "orphan.pid")); err == nil && strings.HasSuffix(string(b), "\n") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	c, dir := agentWith(t, linuxrunner.Options{Spawn: func(start func() error) error { return busy(start) }},
		wire.Hello{Rlimits: []wire.Rlimit{{Resource: unix.RLIMIT_CPU, Name: "RLIMIT_CPU", Soft: 30, Hard: 31}}})
	ws = dir
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rep wire.ExecReply
	script := `(sh -c 'echo $$ > orphan.pid; exec sleep 60' &); exit 0`
	if err := c.Do(ctx, "exec", wire.ExecRequest{Args: []string{"sh", "-c", script}}, &rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ws, "orphan.pid"))
	if err != nil {
		t.Fatalf("the orphan never started: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	var lim unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_CPU, nil, &lim); err != nil {
		t.Fatalf("the orphan %d: %v", pid, err)
	}
	if lim.Cur != 30 || lim.Max != 31 {
		t.Fatalf("the orphan's RLIMIT_CPU is %+v, want {Cur:30 Max:31}: it escaped the command's limit", lim)
	}
}

// TestRlimitThatCannotBeSetRefusesTheCommand: a limit the agent cannot
// apply (an open-files limit above the kernel's nr_open, which even root
// may not set) refuses the command with an error that names the limit,
// runs nothing, and leaves the agent serving.
func TestRlimitThatCannotBeSetRefusesTheCommand(t *testing.T) {
	skipWithoutClone(t)
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		t.Skip("no /proc/sys/fs/nr_open:", err)
	}
	nrOpen, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	c, ws := agentWith(t, linuxrunner.Options{}, wire.Hello{Rlimits: []wire.Rlimit{{Resource: unix.RLIMIT_NOFILE, Name: "RLIMIT_NOFILE", Soft: nrOpen + 1, Hard: nrOpen + 1}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Do(ctx, "exec", wire.ExecRequest{Args: []string{"touch", "ran"}}, nil)
	var we *wire.WireError
	if !errors.As(err, &we) || we.Code != wire.CodeExec || !strings.Contains(we.Message, "RLIMIT_NOFILE") {
		t.Fatalf("exec with an rlimit that cannot be set: %v; want a %s error naming RLIMIT_NOFILE", err, wire.CodeExec)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the command ran without its limit")
	}
	// Still serving: a request that starts nothing.
	if err := c.Do(ctx, wire.OpFSStat.Name, wire.FSPathRequest{Path: "."}, nil); err != nil {
		t.Fatalf("the agent after the refusal: %v", err)
	}
}

// TestOrphansAreReapedWhileTheirCommandRuns: orphans a command leaves
// (here a hundred double forks that exit at once) are reaped while the
// command still runs: each zombie holds a PID that counts against the
// sandbox's pids limit. No signal tells the agent of an orphan's exit
// any more (notifyExits), so the reaper looks on a timer while commands
// run.
func TestOrphansAreReapedWhileTheirCommandRuns(t *testing.T) {
	c := benchAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var job wire.ExecReply
	script := `sleep 1.5; i=0; while [ $i -lt 100 ]; do (true &); i=$((i+1)); done; echo forked; sleep 30`
	if err := c.Do(ctx, "exec", wire.ExecRequest{Job: true, Args: []string{"sh", "-c", script}}, &job); err != nil {
		t.Fatal(err)
	}
	defer c.Do(context.Background(), "job.kill", wire.JobSignalRequest{ID: job.JobID, Signal: int(syscall.SIGKILL)}, nil)
	zombies := func() int {
		n := 0
		self := strconv.Itoa(os.Getpid())
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			i := strings.LastIndexByte(string(b), ')')
			if f := strings.Fields(string(b[i+2:])); len(f) > 1 && f[0] == "Z" && f[1] == self {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var out wire.JobOutput
		_ = c.Do(ctx, "job.output", wire.JobOutputRequest{ID: job.JobID}, &out)
		if strings.Contains(string(out.Data), "forked") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never finished forking: %+v", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		n := zombies()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orphans of a running command are still zombies", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCommandsStartWithDefaultSignals: a command starts with no signal
// blocked and none ignored that the agent's process did not ignore
// itself, and its exit status still reaches the caller, although the
// agent puts SIGCHLD and the high real-time signals back to SIG_DFL
// (quietSignals) and its forked child resets only the signals the agent
// still handles: SIG_IGN there would be inherited through execve (and on
// SIGCHLD would drop exit statuses), a mask left blocked would be too.
func TestCommandsStartWithDefaultSignals(t *testing.T) {
	skipWithoutClone(t)
	// What this process ignored before the runner began (a CI runner may
	// have ignored some for it).
	own := map[string]string{}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			own[k] = strings.TrimSpace(v)
		}
	}
	c, ws := agentWith(t, linuxrunner.Options{}, wire.Hello{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rep wire.ExecReply
	if err := c.Do(ctx, "exec", wire.ExecRequest{Args: []string{"sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status > sig.txt; exit 7"}}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != 7 {
		t.Errorf("exit code %d, want 7", rep.ExitCode)
	}
	out, err := os.ReadFile(filepath.Join(ws, "sig.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{"SigBlk:\t0000000000000000", "SigIgn:\t" + own["SigIgn"]} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the command's signal state:\n%s\nwant %q (the agent's own SigIgn: %s)", got, want, own["SigIgn"])
		}
	}
}

// TestCommandsLeaveNoDescriptorsInTheAgent: the runner keeps the write
// ends of a command's output pipes open in the agent until its process
// exits (proc.held: the exit then wakes the agent once, not once per pipe
// as well), and closes them on every way a command ends — an exit, a
// kill at its timeout, a child left holding the output, a start that
// fails — so that no descriptor stays behind but the spare pipes made
// for the next start (spares); and a command that closes its own output
// early still has everything it printed delivered, with its exit.
func TestCommandsLeaveNoDescriptorsInTheAgent(t *testing.T) {
	skipWithoutClone(t)
	c, _ := agentWith(t, linuxrunner.Options{}, wire.Hello{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(req wire.ExecRequest) (wire.ExecReply, string, error) {
		var mu sync.Mutex
		var out strings.Builder
		raw, err := c.DoStreaming(ctx, "exec", req, agent.Handlers{OnData: func(ft wire.FrameType, b []byte) {
			mu.Lock()
			if ft == wire.FrameStdout { // stderr is only counted
				out.Write(b)
			} else {
				out.WriteString(strings.Repeat("!", len(b)))
			}
			mu.Unlock()
		}})
		var rep wire.ExecReply
		if err == nil {
			err = json.Unmarshal(raw, &rep)
		}
		mu.Lock()
		defer mu.Unlock()
		return rep, out.String(), err
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	// The first command opens what the runner keeps for good (its
	// /dev/null, and the spare pipes the next command takes).
	if _, _, err := run(wire.ExecRequest{Args: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	// Its reply comes before its output is closed: wait for the count
	// to settle.
	settled := func() int {
		n := -1
		for range 100 {
			linuxrunner.FillSpares()
			m := fds()
			if m == n {
				return n
			}
			n = m
			time.Sleep(20 * time.Millisecond)
		}
		return n
	}
	before := settled()
	rep, out, err := run(wire.ExecRequest{Args: []string{"sh", "-c", "echo out; echo err >&2; exec >&- 2>&-; sleep 0.2; exit 3"}})
	if err != nil || rep.ExitCode != 3 || strings.ReplaceAll(out, "!", "") != "out\n" || strings.Count(out, "!") != 4 {
		t.Errorf("a command that closes its output early: exit %d, output %q (\"!\" a byte of stderr), %v; want 3, \"out\\n\" and 4 bytes of stderr", rep.ExitCode, out, err)
	}
	if rep, _, err := run(wire.ExecRequest{Args: []string{"sleep", "5"}, TimeoutMs: 100}); err != nil || !rep.TimedOut {
		t.Errorf("a command past its timeout: %+v, %v; want it killed", rep, err)
	}
	if rep, _, err := run(wire.ExecRequest{Args: []string{"sh", "-c", "sleep 0.6 & echo started"}}); err != nil || len(rep.LeftRunning) == 0 {
		t.Errorf("a command whose child keeps its output: %+v, %v; want the child in LeftRunning", rep, err)
	}
	if _, _, err := run(wire.ExecRequest{Args: []string{"/etc/hostname"}}); err == nil {
		t.Error("exec of a file that is not a program succeeded")
	}
	// The child left running ends within a second; the replies' closes
	// run just after each reply.
	deadline := time.Now().Add(5 * time.Second)
	for settled() != before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := settled(); n != before {
		t.Fatalf("the agent holds %d descriptors after the commands ended, %d before", n, before)
	}
}
