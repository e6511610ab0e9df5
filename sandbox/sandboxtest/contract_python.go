package sandboxtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// pythonTests cover the Python contexts forked from a template
// (WithPythonImports): they behave as contexts started afresh, on every
// backend.
var pythonTests = []contractTest{
	{name: "ImportsForkContexts", run: testPythonImportsFork},
	{name: "ImportsFreshRandomState", run: testPythonImportsRandom},
	{name: "ImportsFailureIsCoded", run: testPythonImportsFailure},
}

// pyRun runs code in a context and fails the test on any error.
func (b *box) pyRun(context, code string) string {
	b.t.Helper()
	ex, err := b.sb.Python.Run(b.ctx(), code, sandbox.PythonRunOptions{Context: context})
	if err != nil {
		b.t.Fatalf("Python.Run(%s, %q): %v", context, code, err)
	}
	if ex.Error != nil {
		b.t.Fatalf("Python.Run(%s, %q): %v\n%s", context, code, ex.Error, strings.Join(ex.Error.Traceback, "\n"))
	}
	if ex.Result == nil {
		return ""
	}
	return ex.Result.Plain()
}

func needSandboxPython(b *box) {
	if !b.sb.Info().PythonAvailable {
		Unavailable(b.t, "python", "the sandbox has no python3")
	}
}

// testPythonImportsFork: contexts of a sandbox with WithPythonImports have
// the modules bound, are children of one template interpreter, run with
// the rlimits a command gets, keep their state across an interrupt (which
// reaches them through the template), report their exit code, and Remove
// ends them and what they started.
func testPythonImportsFork(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithPythonImports("json", "xml.dom"))
	needSandboxPython(b)
	probe := "import os, resource\n" +
		"(os.getppid(), b'template' in open('/proc/%d/cmdline' % os.getppid(), 'rb').read(), json.dumps([1]), xml.dom.__name__, " +
		"resource.getrlimit(resource.RLIMIT_FSIZE))"
	first := b.pyRun("", probe)
	if err := b.sb.Python.Create(b.ctx(), "second"); err != nil {
		t.Fatal(err)
	}
	second := b.pyRun("second", probe)
	tpl, rest, _ := strings.Cut(strings.TrimPrefix(first, "("), ", ")
	res := b.run(sandbox.Command{Args: []string{"python3", "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_FSIZE))"}})
	want := "True, '[1]', 'xml.dom', " + strings.TrimSpace(res.Stdout) + ")"
	if rest != want || !strings.HasPrefix(second, "("+tpl+", ") || strings.TrimPrefix(second, "("+tpl+", ") != want {
		t.Fatalf("contexts: default %s, second %s; want (TEMPLATE_PID, %s for both, one template", first, second, want)
	}

	ex, err := b.sb.Python.Run(b.ctx(), "y = 41\nimport time\ntime.sleep(60)", sandbox.PythonRunOptions{Timeout: time.Second})
	if sandbox.CodeOf(err) != sandbox.CodeTimeout || ex == nil || !ex.TimedOut || ex.StateLost {
		t.Fatalf("a timeout in a forked context: %+v %v", ex, err)
	}
	if got := b.pyRun("", "y + 1"); got != "42" {
		t.Fatalf("the state after the interrupt: %s", got)
	}

	ex, err = b.sb.Python.Run(b.ctx(), "print('bye')\nimport os, time\ntime.sleep(0.5)\nos._exit(7)", sandbox.PythonRunOptions{})
	if err == nil || !strings.Contains(err.Error(), "exit code 7") || ex == nil || !ex.StateLost || ex.Stdout != "bye\n" {
		t.Fatalf("os._exit(7) in a forked context: %+v %v", ex, err)
	}
	if got := b.pyRun("", "json.dumps(2), 'y' in dir()"); got != "('2', False)" {
		t.Fatalf("the context after its process died: %s", got)
	}

	b.pyRun("second", fmt.Sprintf("import subprocess\np = subprocess.Popen(%q.split())", b.sleep()))
	waitMarked(t, b.marker, 1)
	if err := b.sb.Python.Remove(b.ctx(), "second"); err != nil {
		t.Fatal(err)
	}
	expectNoSurvivors(t, b.marker, "Python.Remove of a forked context")
	if got := b.pyRun("", "json.dumps(3)"); got != "'3'" {
		t.Fatalf("the default context after another was removed: %s", got)
	}
}

// testPythonImportsRandom: two forked contexts draw different numbers from
// Python's random and numpy's global generator (a fork copies generator
// state; the template reseeds each child).
func testPythonImportsRandom(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithPythonImports("random", "numpy"))
	needSandboxPython(b)
	if err := b.sb.Python.Create(b.ctx(), "a"); err != nil {
		if sandbox.CodeOf(err) == sandbox.CodeUnavailable && strings.Contains(err.Error(), "numpy") {
			Unavailable(t, "python", "the sandbox's python3 has no numpy: "+err.Error())
		}
		t.Fatal(err)
	}
	if err := b.sb.Python.Create(b.ctx(), "b"); err != nil {
		t.Fatal(err)
	}
	draw := "random.random(), float(numpy.random.rand()), int(numpy.random.randint(1 << 62))"
	a, c := b.pyRun("a", draw), b.pyRun("b", draw)
	as, cs := strings.Split(strings.Trim(a, "()"), ", "), strings.Split(strings.Trim(c, "()"), ", ")
	for i := range as {
		if i < len(cs) && as[i] == cs[i] {
			t.Fatalf("contexts a and b drew the same number from generator %d: %s and %s", i, a, c)
		}
	}
}

// testPythonImportsFailure: a module that does not import makes the Python
// call fail with SBX_UNAVAILABLE naming it; the sandbox stays usable.
func testPythonImportsFailure(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithPythonImports("json", "sandboxkit_no_such_module"))
	needSandboxPython(b)
	for i := 0; i < 2; i++ {
		_, err := b.sb.Python.Run(b.ctx(), "1", sandbox.PythonRunOptions{})
		wantCode(t, "Python.Run with a module that does not import", err, sandbox.CodeUnavailable)
		if !strings.Contains(err.Error(), "sandboxkit_no_such_module") || !strings.Contains(err.Error(), "ModuleNotFoundError") {
			t.Fatalf("the error does not say which module failed and why: %v", err)
		}
	}
	b.usable()
}
