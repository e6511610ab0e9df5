//go:build linux

package local_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// TestLandlockTierForksPythonContexts: the Landlock tier (no pid namespace,
// no unix sockets) hosts contexts forked from a template too: the fork
// takes the stand-in process's pipes through /proc, which its Landlock
// rules allow.
func TestLandlockTierForksPythonContexts(t *testing.T) {
	sb := newLandlockTier(t, sandbox.WithPythonImports("json"))
	if !sb.Info().PythonAvailable {
		t.Skip("no python3 in the sandbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	probe := "import os\nb'template' in open('/proc/%d/cmdline' % os.getppid(), 'rb').read(), json.dumps([1])"
	for _, name := range []string{"", "second"} {
		if name != "" {
			if err := sb.Python.Create(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		ex, err := sb.Python.Run(ctx, probe, sandbox.PythonRunOptions{Context: name})
		if err != nil || ex.Result == nil || ex.Result.Plain() != "(True, '[1]')" {
			t.Fatalf("context %q: %+v %v", name, ex, err)
		}
	}
	ex, err := sb.Python.Run(ctx, "y = 1\nimport time\ntime.sleep(30)", sandbox.PythonRunOptions{Timeout: time.Second})
	if sandbox.CodeOf(err) != sandbox.CodeTimeout || ex == nil || ex.StateLost || !strings.Contains(ex.Error.Name, "KeyboardInterrupt") {
		t.Fatalf("interrupt: %+v %v", ex, err)
	}
}

// TestForkedContextsAtTheProcessLimit: when the sandbox's process limit is
// reached, a new forked context fails with a code and the template
// survives: once processes are freed, contexts start again, forked from
// the same template.
func TestForkedContextsAtTheProcessLimit(t *testing.T) {
	sb := newLocal(t, sandbox.WithPythonImports("json"), sandbox.WithLimits(sandbox.Limits{Pids: 48}))
	t.Cleanup(func() { sb.Close() })
	if !sb.Info().PythonAvailable {
		t.Skip("no python3 in the sandbox")
	}
	enforced := false
	for _, c := range sb.Info().Controls {
		enforced = enforced || c.Name == "pids" && c.Enforced
	}
	if !enforced {
		t.Skip("the process limit is not enforced at this tier")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(name, code string) string {
		t.Helper()
		ex, err := sb.Python.Run(ctx, code, sandbox.PythonRunOptions{Context: name})
		if err != nil || ex.Error != nil || ex.Result == nil {
			t.Fatalf("%s: %+v %v", name, ex, err)
		}
		return ex.Result.Plain()
	}
	tpl := run("", "import os, subprocess\nos.getppid()")
	// Fill the limit with sleeps (the spare context and stand-in are
	// already there; the template's next spare cannot be forked).
	run("", "procs = []\nwhile True:\n    try:\n        procs.append(subprocess.Popen(['sleep', '1000']))\n"+
		"    except OSError:\n        break\nlen(procs) > 0")
	var failed error
	for i := 0; i < 4 && failed == nil; i++ {
		failed = sb.Python.Create(ctx, "full"+strconv.Itoa(i))
	}
	if failed == nil {
		t.Fatal("every context started at the process limit")
	}
	if code := sandbox.CodeOf(failed); code != sandbox.CodeUnavailable && code != sandbox.CodeExec && code != sandbox.CodeBusy {
		t.Fatalf("a context at the process limit failed with %v (code %q)", failed, code)
	}
	t.Logf("at the limit: %v", failed)
	run("", "for p in procs:\n    p.kill()\n    p.wait()\nTrue")
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = sb.Python.Create(ctx, "after"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no context starts after the processes were freed: %v", err)
	}
	if got := run("after", "import os\nos.getppid()"); got != tpl {
		t.Fatalf("the context after the limit was forked from %s, not from the template %s (it did not survive)", got, tpl)
	}
}
