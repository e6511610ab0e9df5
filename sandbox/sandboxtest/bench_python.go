package sandboxtest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// PythonBenchModules are the imports of ComparePythonContexts.
var PythonBenchModules = []string{"numpy", "pandas"}

// ComparePythonContexts benchmarks a new Python context with numpy and
// pandas imported, ready to run: Python.Create in a sandbox made with
// WithPythonImports, whose template has started (issue 22's target:
// <= 10 ms). In the same run (CompareWithFloors), against:
//
//   - bare: Python.Create without imports (an interpreter's start);
//   - imports-afresh: Python.Create, then `import numpy, pandas` in it
//     (what the context costs without a template);
//   - command: Commands.Run("true") (a process started through the agent,
//     as every forked context's stand-in process is);
//   - fork: a Python.Run in a forked context whose cell forks the
//     interpreter (numpy and pandas imported) and waits for the child to
//     write a byte (a fork's own cost plus one run's round trip).
//
// newSandbox creates a sandbox with the backend's options plus opts; the
// sandboxes are closed when the benchmark ends. Contexts are removed
// outside the measured time.
func ComparePythonContexts(b *testing.B, newSandbox func(opts ...sandbox.Option) (*sandbox.Sandbox, error)) {
	b.Helper()
	ctx := context.Background()
	forked, err := newSandbox(sandbox.WithPythonImports(PythonBenchModules...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { forked.Close() })
	plain, err := newSandbox()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { plain.Close() })
	if !plain.Info().PythonAvailable {
		Unavailable(b, "python", "the sandbox has no python3")
	}
	// The default context waits for the template: from here on the
	// template is ready, as in a pooled sandbox.
	ex, err := forked.Python.Run(ctx, "import os\n"+
		"def _sbk_fork():\n"+
		"    r, w = os.pipe()\n"+
		"    pid = os.fork()\n"+
		"    if pid == 0:\n"+
		"        os.write(w, b'c')\n"+
		"        os._exit(0)\n"+
		"    os.read(r, 1)\n"+
		"    os.close(r); os.close(w)\n"+
		"    os.waitpid(pid, 0)\n", sandbox.PythonRunOptions{})
	if err != nil || ex.Error != nil {
		if sandbox.CodeOf(err) == sandbox.CodeUnavailable && strings.Contains(err.Error(), "import") {
			Unavailable(b, "python", "the sandbox's python3 lacks numpy or pandas: "+err.Error())
		}
		b.Fatalf("the forked sandbox's default context: %+v %v", ex, err)
	}
	n := 0
	create := func(sb *sandbox.Sandbox, code string) Timed {
		return func(b *testing.B) func() {
			n++
			name := "bench" + strconv.Itoa(n)
			if err := sb.Python.Create(ctx, name); err != nil {
				b.Fatal(err)
			}
			if code != "" {
				if ex, err := sb.Python.Run(ctx, code, sandbox.PythonRunOptions{Context: name}); err != nil || ex.Error != nil {
					b.Fatalf("%s: %+v %v", code, ex, err)
				}
			}
			return func() {
				if err := sb.Python.Remove(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	CompareWithFloors(b, create(forked, ""),
		Floor{Name: "bare", Run: create(plain, "")},
		Floor{Name: "imports-afresh", Run: create(plain, "import "+strings.Join(PythonBenchModules, ", "))},
		Floor{Name: "command", Run: func(b *testing.B) func() {
			if res, err := plain.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("%+v %v", res, err)
			}
			return nil
		}},
		Floor{Name: "fork", Run: func(b *testing.B) func() {
			if ex, err := forked.Python.Run(ctx, "_sbk_fork()", sandbox.PythonRunOptions{}); err != nil || ex.Error != nil {
				b.Fatalf("fork: %+v %v", ex, err)
			}
			return nil
		}},
	)
}
