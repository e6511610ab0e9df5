package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/pykernel"
)

// The Python kernel's and bash sessions' behaviours checked where they can
// break differently on this backend: the kernel and bash run in the pod,
// started by the resident agent, and every byte of their protocols crosses
// the pod's attach stream (API server, kubelet, container runtime).

func pyRun(t *testing.T, sb *sandbox.Sandbox, code string, opts sandbox.PythonRunOptions) *sandbox.Execution {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	ex, err := sb.Python.Run(context.Background(), code, opts)
	if err != nil {
		t.Fatalf("Python.Run(%q): %v", code, err)
	}
	return ex
}

func plain(ex *sandbox.Execution) string {
	if ex.Result == nil {
		return ""
	}
	return ex.Result.Plain()
}

func TestPythonKernelOnKubernetes(t *testing.T) {
	sb := newSandbox(t)
	if sb.Info().Python == "" {
		t.Fatal("the test image has python3, but Info().Python is empty")
	}
	t.Run("state persists and the last expression is the result", func(t *testing.T) {
		first := pyRun(t, sb, "import os\nx = 41\nos.getcwd()", sandbox.PythonRunOptions{})
		if plain(first) != "'/workspace'" {
			t.Fatalf("cwd result %q, want '/workspace'", plain(first))
		}
		second := pyRun(t, sb, "x + 1", sandbox.PythonRunOptions{})
		if plain(second) != "42" || second.Count != first.Count+1 {
			t.Fatalf("got result %q count %d after count %d, want 42 and the next count", plain(second), second.Count, first.Count)
		}
	})
	t.Run("an exception is data and the context stays usable", func(t *testing.T) {
		ex := pyRun(t, sb, "def f():\n    return 1/0\nf()", sandbox.PythonRunOptions{})
		if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" {
			t.Fatalf("error %+v, want ZeroDivisionError", ex.Error)
		}
		if ok := pyRun(t, sb, "x", sandbox.PythonRunOptions{}); plain(ok) != "41" {
			t.Fatalf("after the exception x = %q", plain(ok))
		}
	})
	t.Run("matplotlib figures and DataFrames come back rich", func(t *testing.T) {
		ex := pyRun(t, sb, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", sandbox.PythonRunOptions{Timeout: time.Minute})
		if len(ex.Outputs) != 1 || !bytes.HasPrefix(ex.Outputs[0].Data[pykernel.MIMEPNG], []byte("\x89PNG\r\n")) {
			t.Fatalf("want one PNG figure, got %d outputs (stderr %q, error %v)", len(ex.Outputs), ex.Stderr, ex.Error)
		}
		df := pyRun(t, sb, "import pandas as pd\npd.DataFrame({'a': [1, 2]})", sandbox.PythonRunOptions{})
		if df.Result == nil || !strings.Contains(string(df.Result.Data[pykernel.MIMEHTML]), "<table") {
			t.Fatalf("DataFrame result has no HTML table: %+v", df.Result)
		}
	})
	t.Run("a timeout interrupts the code and keeps the state", func(t *testing.T) {
		ex, err := sb.Python.Run(context.Background(), "y = 7\nimport time\ntime.sleep(60)", sandbox.PythonRunOptions{Timeout: 500 * time.Millisecond})
		if !errors.Is(err, sandbox.ErrTimeout) || ex == nil || !ex.TimedOut || ex.StateLost {
			t.Fatalf("got %+v, %v; want a timeout with the state kept", ex, err)
		}
		if after := pyRun(t, sb, "x, y", sandbox.PythonRunOptions{}); plain(after) != "(41, 7)" {
			t.Fatalf("state after the timeout: %q", plain(after))
		}
	})
	t.Run("python runs as the sandbox's uid without capabilities", func(t *testing.T) {
		ex := pyRun(t, sb, "import os\n(os.getuid(), open('/proc/self/status').read().count('CapEff:\\t0000000000000000'))", sandbox.PythonRunOptions{})
		if want := fmt.Sprintf("(%s, 1)", sb.Info().Extra["uid"]); plain(ex) != want {
			t.Fatalf("uid and empty capability set: %s, want %s", plain(ex), want)
		}
	})
}

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

func TestBashSessionsOnKubernetes(t *testing.T) {
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
		r, err = sh.Input(ctx, "C-c", sandbox.ShellWaitOptions{Timeout: 10 * time.Second})
		if err != nil || exitOf(r) != "130" {
			t.Fatalf("C-c: %+v, %v; want exit 130", r, err)
		}
		if r := shRun(t, sh, "echo still here", 10*time.Second); r.Output != "still here\n" {
			t.Fatalf("after C-c: %q", r.Output)
		}
	})
	t.Run("the session sees a terminal and the sandbox's uid", func(t *testing.T) {
		r := shRun(t, sh, "[ -t 0 ] && echo tty; id -u", 10*time.Second)
		if want := "tty\n" + sb.Info().Extra["uid"] + "\n"; r.Output != want {
			t.Fatalf("printed %q, want %q", r.Output, want)
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
