//go:build linux

package local_test

import (
	"context"
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
