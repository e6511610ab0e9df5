package docker_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/pykernel"
)

// The Python kernel's behaviours (package pykernel's tests run them against
// a host process) checked again where they can break differently: the
// kernel's python3 runs in the container, started by the resident agent,
// and every byte of its protocol crosses the container's attach stream.

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

func TestPythonKernelOnDocker(t *testing.T) {
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
		if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || !strings.Contains(strings.Join(ex.Error.Traceback, "\n"), "return 1/0") {
			t.Fatalf("error %+v, want ZeroDivisionError with the failing line in the traceback", ex.Error)
		}
		if ok := pyRun(t, sb, "x", sandbox.PythonRunOptions{}); plain(ok) != "41" {
			t.Fatalf("after the exception x = %q", plain(ok))
		}
	})
	t.Run("prints of child processes are captured", func(t *testing.T) {
		ex := pyRun(t, sb, "import subprocess\nprint('py', flush=True)\nsubprocess.run(['sh', '-c', 'echo child; echo err >&2'])\nNone", sandbox.PythonRunOptions{})
		if ex.Stdout != "py\nchild\n" || ex.Stderr != "err\n" {
			t.Fatalf("stdout %q stderr %q", ex.Stdout, ex.Stderr)
		}
	})
	t.Run("matplotlib figures and DataFrames come back rich", func(t *testing.T) {
		ex := pyRun(t, sb, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", sandbox.PythonRunOptions{})
		if len(ex.Outputs) != 1 || !bytes.HasPrefix(ex.Outputs[0].Data[pykernel.MIMEPNG], []byte("\x89PNG\r\n")) {
			t.Fatalf("want one PNG figure, got %d outputs (stderr %q, error %v)", len(ex.Outputs), ex.Stderr, ex.Error)
		}
		df := pyRun(t, sb, "import pandas as pd\npd.DataFrame({'a': [1, 2]})", sandbox.PythonRunOptions{})
		if df.Result == nil || !strings.Contains(string(df.Result.Data[pykernel.MIMEHTML]), "<table") {
			t.Fatalf("DataFrame result has no HTML table: %+v", df.Result)
		}
	})
	t.Run("output streams while the code runs", func(t *testing.T) {
		var mu sync.Mutex
		var firstAt time.Time
		start := time.Now()
		ex := pyRun(t, sb, "import time\nprint('early', flush=True)\ntime.sleep(1.5)\nprint('late')", sandbox.PythonRunOptions{
			OnOutput: func(o sandbox.PythonOutput) {
				mu.Lock()
				defer mu.Unlock()
				if firstAt.IsZero() && strings.Contains(o.Text, "early") {
					firstAt = time.Now()
				}
			}})
		end := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if firstAt.IsZero() || ex.Stdout != "early\nlate\n" {
			t.Fatalf("stdout %q, early chunk seen: %v", ex.Stdout, !firstAt.IsZero())
		}
		// The early chunk arrived before the sleep ended, not with the result.
		if end.Sub(firstAt) < time.Second {
			t.Fatalf("the early print arrived %v after the start and %v before the end: it was not streamed", firstAt.Sub(start), end.Sub(firstAt))
		}
	})
	t.Run("a timeout interrupts the code and keeps the state", func(t *testing.T) {
		ex, err := sb.Python.Run(context.Background(), "y = 7\nimport time\ntime.sleep(60)", sandbox.PythonRunOptions{Timeout: 500 * time.Millisecond})
		if !errors.Is(err, sandbox.ErrTimeout) || ex == nil || !ex.TimedOut || ex.StateLost || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("got %+v, %v; want a KeyboardInterrupt timeout with the state kept", ex, err)
		}
		if after := pyRun(t, sb, "x, y", sandbox.PythonRunOptions{}); plain(after) != "(41, 7)" {
			t.Fatalf("state after the timeout: %q", plain(after))
		}
	})
	t.Run("code that ignores the interrupt loses the state, and the context works again", func(t *testing.T) {
		const ctxName = "stubborn"
		if err := sb.Python.Create(context.Background(), ctxName); err != nil {
			t.Fatal(err)
		}
		pyRun(t, sb, "z = 1", sandbox.PythonRunOptions{Context: ctxName})
		ex, err := sb.Python.Run(context.Background(),
			"import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
			sandbox.PythonRunOptions{Context: ctxName, Timeout: 500 * time.Millisecond})
		if !errors.Is(err, sandbox.ErrTimeout) || ex == nil || !ex.StateLost {
			t.Fatalf("got %+v, %v; want a timeout that lost the state", ex, err)
		}
		again := pyRun(t, sb, "'z' in globals()", sandbox.PythonRunOptions{Context: ctxName})
		if plain(again) != "False" {
			t.Fatalf("after the restart, z defined = %q, want False", plain(again))
		}
	})
	t.Run("contexts are independent", func(t *testing.T) {
		for _, n := range []string{"one", "two"} {
			if err := sb.Python.Create(context.Background(), n); err != nil {
				t.Fatal(err)
			}
		}
		pyRun(t, sb, "name = 'one'", sandbox.PythonRunOptions{Context: "one"})
		pyRun(t, sb, "name = 'two'", sandbox.PythonRunOptions{Context: "two"})
		if got := pyRun(t, sb, "name", sandbox.PythonRunOptions{Context: "one"}); plain(got) != "'one'" {
			t.Fatalf("context one sees name = %s", plain(got))
		}
		names := map[string]bool{}
		cs, err := sb.Python.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			names[c.Name] = true
		}
		if !names["one"] || !names["two"] || !names["default"] {
			t.Fatalf("contexts listed: %v", names)
		}
	})
	t.Run("python runs as the sandbox user without capabilities on a read-only root", func(t *testing.T) {
		ex := pyRun(t, sb, "import os\n(os.getuid(), open('/proc/self/status').read().count('CapEff:\\t0000000000000000'))", sandbox.PythonRunOptions{})
		if plain(ex) != "(65534, 1)" {
			t.Fatalf("uid and empty capability set: %s", plain(ex))
		}
		// The root file system is read-only: EROFS, not a permission check.
		w := pyRun(t, sb, "import errno\ntry:\n    open('/etc/x', 'w')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])", sandbox.PythonRunOptions{})
		if w.Stdout != "EROFS\n" {
			t.Fatalf("writing /etc printed %q, want EROFS", w.Stdout)
		}
	})
}

func TestPythonAfterCloseIsAClosedError(t *testing.T) {
	sb := newSandbox(t)
	pyRun(t, sb, "1", sandbox.PythonRunOptions{})
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := sb.Python.Run(context.Background(), "1", sandbox.PythonRunOptions{})
	if !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("run after Close: %v, want %s", err, sandbox.CodeClosed)
	}
}
