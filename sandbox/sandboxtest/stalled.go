package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// StalledAgent checks that calls keep their deadlines while sb's agent
// reads nothing: stop makes it stop reading its stream (SIGSTOP of the
// agent's process, in the backend's own test), resume lets it go on.
//
// A request too big for the stream's buffers (an 8 MB Files.Write) sent
// to an agent that reads nothing (stopped, frozen, or hostile) used to
// block in the stream's write with no deadline: the caller's 2 s deadline
// passed unnoticed, and every later call queued behind the blocked write,
// deadline or not, so the whole sandbox hung until Close. Each call must
// end with SBX_TIMEOUT at its deadline (plus the agent's grace); once the
// agent reads again the sandbox works, and the big file is whole or
// absent, never torn.
//
// A Python cell (when the sandbox has python3) and a bash session's
// command (when it has bash), both started before the agent stops, are
// checked the same way, first: the Python kernel interrupts the code at
// the deadline, waits its interrupt grace, kills the process and used to
// wait for the process's end, which the stopped agent never reports
// (Python.Run with a 2 s deadline had not returned after 30 s). After the
// agent goes on, a cell runs again (in a fresh process: StateLost says
// the state is gone) and the session runs commands again.
func StalledAgent(t *testing.T, sb *sandbox.Sandbox, stop, resume func()) {
	t.Helper()
	ctx := context.Background()
	if err := sb.Files.Write(ctx, "small.txt", []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	hasPython := sb.Info().Python != ""
	if hasPython {
		// The kernel runs before the agent stops: the cell below is sent
		// to a live process.
		if err := sb.Python.Create(ctx, "second"); err != nil {
			t.Fatalf("Python.Create before the stop: %v", err)
		}
		for _, name := range []string{"default", "second"} {
			if _, err := sb.Python.Run(ctx, "x = 41", sandbox.PythonRunOptions{Context: name}); err != nil {
				t.Fatalf("Python.Run in context %s before the stop: %v", name, err)
			}
		}
	} else {
		if Required("python") {
			t.Fatalf("%s names python, but the sandbox has no python3", RequireEnv)
		}
		t.Log("no python3 in the sandbox: the Python.Run case is left out")
	}
	oldPIDs := pythonPIDs(t, sb)
	var sh, sh2 *sandbox.Shell
	sh2PID := 0
	if sb.Info().Bash != "" {
		var err error
		if sh, err = sb.Shells.Open(ctx, sandbox.ShellOptions{}); err != nil {
			t.Fatalf("Shells.Open before the stop: %v", err)
		}
		if sh2, err = sb.Shells.Open(ctx, sandbox.ShellOptions{}); err != nil {
			t.Fatalf("Shells.Open before the stop: %v", err)
		}
		res, err := sh2.Run(ctx, "echo $$", sandbox.ShellRunOptions{})
		if err != nil {
			t.Fatalf("Shell.Run before the stop: %v", err)
		}
		if sh2PID, err = strconv.Atoi(strings.TrimSpace(res.Output)); err != nil {
			t.Fatalf("Shell.Run echo $$ before the stop: %q", res.Output)
		}
		if _, err := sh.Run(ctx, "y=7", sandbox.ShellRunOptions{}); err != nil {
			t.Fatalf("Shell.Run before the stop: %v", err)
		}
	} else {
		t.Log("no bash in the sandbox: the Shell.Run case is left out")
	}
	resumeOnce := sync.OnceFunc(resume)
	t.Cleanup(resumeOnce)

	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	type stalledCall struct {
		name string
		call func(ctx context.Context) error
	}
	var calls []stalledCall
	if hasPython {
		calls = append(calls, stalledCall{"Python.Run", func(ctx context.Context) error {
			_, err := sb.Python.Run(ctx, "x += 1", sandbox.PythonRunOptions{})
			return err
		}})
	}
	if sh != nil {
		// A command the stopped agent never receives: the result says it
		// runs on (the caller's deadline is the call's timeout), or the
		// call fails with SBX_TIMEOUT; either way it returns.
		calls = append(calls, stalledCall{"Shell.Run", func(ctx context.Context) error {
			res, err := sh.Run(ctx, "echo ran-$y", sandbox.ShellRunOptions{})
			if err == nil && res.Running {
				return sandbox.ErrTimeout
			}
			if err == nil {
				t.Errorf("Shell.Run on a stopped agent finished: %+v", res)
			}
			return err
		}})
	}
	calls = append(calls, []stalledCall{
		{"Files.Write 8 MB", func(ctx context.Context) error { return sb.Files.Write(ctx, "big.bin", big, 0o644) }},
		{"Files.ReadFile after it", func(ctx context.Context) error { _, err := sb.Files.ReadFile(ctx, "small.txt"); return err }},
		{"Commands.Run after it", func(ctx context.Context) error {
			_, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}})
			return err
		}},
		{"Commands.Run with stdin", func(ctx context.Context) error {
			_, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader("input")})
			return err
		}},
		{"Files.CopyIn", func(ctx context.Context) error {
			return sb.Files.CopyIn(ctx, ".", bytes.NewReader(tarOf(t, "copied.txt", "beta")))
		}},
	}...)
	if sh != nil {
		// Closing a session kills its shell; the stopped agent never
		// reports the end, which Close waited for. Behind the 8 MB
		// request the kill cannot even be sent: Close sends it again
		// until it goes.
		calls = append(calls, stalledCall{"Shell.Close after it", func(ctx context.Context) error { return sh2.Close() }})
	}
	if hasPython {
		// Again, behind the given-up 8 MB request: the context has no
		// process now, and starting one waits for the agent.
		calls = append(calls, stalledCall{"Python.Run after it", func(ctx context.Context) error {
			_, err := sb.Python.Run(ctx, "x += 1", sandbox.PythonRunOptions{})
			return err
		}})
		// A live context behind it: the cell cannot even be sent (and
		// neither can the kill, which is sent again until it goes).
		calls = append(calls, stalledCall{"Python.Run in a second context after it", func(ctx context.Context) error {
			_, err := sb.Python.Run(ctx, "x += 1", sandbox.PythonRunOptions{Context: "second"})
			return err
		}})
	}

	stop()
	for _, c := range calls {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- c.call(cctx) }()
		select {
		case err := <-done:
			if sandbox.CodeOf(err) != sandbox.CodeTimeout {
				t.Errorf("%s on a stopped agent: %v after %v, want %s", c.name, err, time.Since(start).Round(time.Millisecond), sandbox.CodeTimeout)
			}
			t.Logf("%s with a 2 s deadline on a stopped agent returned after %v", c.name, time.Since(start).Round(time.Millisecond))
		case <-time.After(30 * time.Second):
			resumeOnce()
			cancel()
			t.Fatalf("%s with a 2 s deadline had not returned after 30 s on an agent that reads nothing", c.name)
		}
		cancel()
	}

	// The kills of the last given-up Python process and of the closed
	// session could not be sent (behind the 8 MB request), and their
	// Cancels wait 2 s for the stream: past that, only the engines'
	// retries of the kill end the processes once the agent reads again.
	time.Sleep(5 * time.Second)
	resumeOnce()
	got, err := sb.Files.ReadFile(ctx, "small.txt")
	if err != nil || string(got) != "alpha" {
		t.Fatalf("after the agent went on: ReadFile = %q, %v", got, err)
	}
	if _, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil {
		t.Fatalf("after the agent went on: Commands.Run: %v", err)
	}
	if b, err := sb.Files.ReadFile(ctx, "big.bin"); err == nil && !bytes.Equal(b, big) {
		t.Errorf("big.bin holds %d bytes that are not what was written (torn)", len(b))
	}
	if hasPython {
		for _, name := range []string{"default", "second"} {
			// The stalled cell's process was given up: the context starts
			// afresh, and says so, or (if the agent answered in time
			// after all) it kept its state.
			ex, err := sb.Python.Run(ctx, "print(globals().get('x', 'gone'))", sandbox.PythonRunOptions{Context: name, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("after the agent went on: Python.Run in context %s: %v", name, err)
			}
			out := strings.TrimSpace(ex.Stdout)
			switch {
			case out == "gone" && !ex.StateLost:
				t.Errorf("after the agent went on: context %s lost x but StateLost is not set: %+v", name, ex)
			case out != "gone" && out != "41" && out != "42":
				t.Errorf("after the agent went on: x = %q in context %s, want 41, 42 or a fresh context", out, name)
			}
			t.Logf("after the agent went on: x = %s in context %s, StateLost %v", out, name, ex.StateLost)
			if ex2, err := sb.Python.Run(ctx, "1 + 1", sandbox.PythonRunOptions{Context: name}); err != nil || ex2.Result == nil || ex2.Result.Plain() != "2" {
				t.Fatalf("after the agent went on: Python.Run 1 + 1 in context %s = %+v, %v", name, ex2, err)
			}
		}
		// A process given up while the agent was stopped must not run on
		// once the agent reads the kill it was sent.
		now := pythonPIDs(t, sb)
		for name, pid := range oldPIDs {
			if now[name] == pid {
				continue // kept (or the pid was reused): nothing to check
			}
			expectEnds(t, sb, pid, "the Python process of context "+name+" given up during the stop")
		}
	}
	if sh2PID > 0 {
		expectEnds(t, sb, sh2PID, "the shell of the session closed during the stop")
	}
	if sh != nil {
		// The command typed during the stop runs once the agent reads it
		// (or the session reports itself gone: then a new one must work).
		res, err := sh.Wait(ctx, sandbox.ShellWaitOptions{Timeout: 30 * time.Second})
		if err == nil && !res.Ended {
			res, err = sh.Run(ctx, "echo again-$y", sandbox.ShellRunOptions{Timeout: 30 * time.Second})
			if err != nil || !strings.Contains(res.Output, "again-7") {
				t.Fatalf("after the agent went on: Shell.Run = %+v, %v", res, err)
			}
		} else {
			t.Logf("the session ended during the stop (%v, %q): a new one must work", err, res.EndReason)
			sh2, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
			if err != nil {
				t.Fatalf("after the agent went on: Shells.Open: %v", err)
			}
			if res, err := sh2.Run(ctx, "echo again", sandbox.ShellRunOptions{Timeout: 30 * time.Second}); err != nil || !strings.Contains(res.Output, "again") {
				t.Fatalf("after the agent went on: Shell.Run in a new session = %+v, %v", res, err)
			}
		}
	}
}

// expectEnds fails the test unless process pid (as the sandbox sees it)
// is gone within 10 s.
func expectEnds(t *testing.T, sb *sandbox.Sandbox, pid int, what string) {
	t.Helper()
	script := fmt.Sprintf("i=0; while [ $i -lt 100 ]; do kill -0 %d 2>/dev/null || exit 0; sleep 0.1; i=$((i+1)); done; exit 1", pid)
	res, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c", script}})
	switch {
	case err != nil: // no result: res is nil
		t.Errorf("checking that %s (pid %d) ended: %v", what, pid, err)
	case res.ExitCode != 0:
		t.Errorf("%s (pid %d) still runs 10 s after the agent went on (exit code %d)", what, pid, res.ExitCode)
	}
}

// pythonPIDs maps the running Python contexts to their processes' pids.
func pythonPIDs(t *testing.T, sb *sandbox.Sandbox) map[string]int {
	t.Helper()
	if sb.Info().Python == "" {
		return nil
	}
	cs, err := sb.Python.List(context.Background())
	if err != nil {
		t.Fatalf("Python.List: %v", err)
	}
	m := map[string]int{}
	for _, c := range cs {
		m[c.Name] = c.PID
	}
	return m
}

// tarOf returns a tar stream holding one file.
func tarOf(t *testing.T, name, content string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// StalledAgentClose checks that Close ends everything while sb's agent
// reads nothing (stop stops it; it is not resumed): a Python context and a
// bash session, each with a child process, are given up on the stopped
// agent (a Python.Run past its deadline, a Shell.Close), then sb.Close
// must return, leave none of their processes on the host, and leave no
// goroutine of the Python kernel, the shell sessions or their agent
// processes behind (those given up wait for the agent until Close ends
// their calls). It closes sb.
func StalledAgentClose(t *testing.T, sb *sandbox.Sandbox, stop func()) {
	t.Helper()
	ctx := context.Background()
	before := engineGoroutines()
	marker := fmt.Sprintf("1000.%d", time.Now().UnixNano()%1e9)
	hasPython := sb.Info().Python != ""
	if hasPython {
		if _, err := sb.Python.Run(ctx, "import subprocess\np = subprocess.Popen(['sleep', '"+marker+"'])", sandbox.PythonRunOptions{}); err != nil {
			t.Fatalf("Python.Run before the stop: %v", err)
		}
	} else if Required("python") {
		t.Fatalf("%s names python, but the sandbox has no python3", RequireEnv)
	}
	var sh *sandbox.Shell
	if sb.Info().Bash != "" {
		var err error
		if sh, err = sb.Shells.Open(ctx, sandbox.ShellOptions{}); err != nil {
			t.Fatalf("Shells.Open before the stop: %v", err)
		}
		if _, err := sh.Run(ctx, "sleep "+marker+" &", sandbox.ShellRunOptions{}); err != nil {
			t.Fatalf("Shell.Run before the stop: %v", err)
		}
	}
	if !hasPython && sh == nil {
		t.Skip("neither python3 nor bash in the sandbox")
	}
	waitMarked(t, marker, 1)

	stop()
	within := func(name string, f func()) {
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s had not returned after 30 s on an agent that reads nothing", name)
		}
	}
	if hasPython {
		within("Python.Run with a 2 s deadline", func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			ex, err := sb.Python.Run(cctx, "p.poll()", sandbox.PythonRunOptions{})
			if sandbox.CodeOf(err) != sandbox.CodeTimeout || ex == nil || !ex.StateLost {
				t.Errorf("Python.Run on a stopped agent: %+v, %v; want %s and StateLost", ex, err, sandbox.CodeTimeout)
			}
		})
	}
	if sh != nil {
		within("Shell.Close", func() { _ = sh.Close() })
	}
	t.Logf("before Close: %d goroutines of the engines (%d before the test)", len(engineGoroutines()), len(before))
	within("Sandbox.Close", func() { _ = sb.Close() })
	expectNoSurvivors(t, marker, "Sandbox.Close on a stopped agent")
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := engineGoroutines()
		if len(left) <= len(before) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the Python kernel or the shell sessions are left 10 s after Close (%d before):\n%s",
				len(left), len(before), strings.Join(left, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// engineGoroutines returns the stacks of the goroutines that run code of
// the Python kernel, the shell sessions, or the sandbox's long-lived
// processes.
func engineGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "/sandbox/pykernel.") || strings.Contains(g, "/sandbox/shell.") ||
			strings.Contains(g, "sandbox.(*agentProc)") || strings.Contains(g, "sandbox.(*Sandbox).startProc") {
			out = append(out, g)
		}
	}
	return out
}
