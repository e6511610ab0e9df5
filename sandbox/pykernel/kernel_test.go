package pykernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testPython is Debian's interpreter, which has numpy, matplotlib and pandas
// in CI (the pyenv python3 first on PATH lacks them).
const testPython = "/usr/bin/python3"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testOptions are the options of a test kernel: Debian's Python, a minimal
// environment and a fresh workspace.
func testOptions(t testing.TB) Options {
	mpl := filepath.Join(os.TempDir(), "sandboxkit-pykernel-mplconfig") // font cache survives runs
	return Options{
		Python: testPython,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(),
			"LANG=C.UTF-8", "MPLCONFIGDIR=" + mpl},
		Dir:            t.TempDir(),
		InterruptGrace: 500 * time.Millisecond,
	}
}

// needPython skips (or fails under SANDBOXKIT_REQUIRE=python) without the
// test interpreter.
func needPython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(testPython); err != nil {
		requireOrSkip(t, "python", testPython+" is missing")
	}
}

func newKernel(t testing.TB, o Options) *Kernel {
	t.Helper()
	needPython(t)
	k, err := Start(context.Background(), ExecProc, o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

// requireOrSkip skips, unless SANDBOXKIT_REQUIRE names what is missing (as CI
// sets it): then the missing piece is a failure.
func requireOrSkip(t testing.TB, what, reason string) {
	t.Helper()
	if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), what) {
		t.Fatalf("SANDBOXKIT_REQUIRE has %q but: %s", what, reason)
	}
	t.Skip(reason)
}

var moduleCache sync.Map

// needModules skips (or fails under SANDBOXKIT_REQUIRE=python) when the test
// interpreter cannot import the modules.
func needModules(t testing.TB, mods ...string) {
	t.Helper()
	for _, m := range mods {
		ok, seen := moduleCache.Load(m)
		if !seen {
			err := exec.Command(testPython, "-c", "import "+m).Run()
			ok = err == nil
			moduleCache.Store(m, ok)
		}
		if !ok.(bool) {
			requireOrSkip(t, "python", fmt.Sprintf("%s cannot import %s (apt-get install python3-%s)", testPython, m, m))
		}
	}
}

func run(t testing.TB, k *Kernel, code string) *Execution {
	t.Helper()
	ex, err := k.Run(context.Background(), code, RunOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Run(%q): %v", code, err)
	}
	return ex
}

// want is what a case expects of an Execution; empty fields are not checked
// except Result and Error, whose absence is checked too.
type want struct {
	result       string // text/plain of the result; "" means no result
	stdout       *string
	stdoutHas    string
	stderrHas    string
	errName      string // "" means no error
	errValueHas  string
	tracebackHas []string
	tracebackNot []string
	mimes        []string // MIME types the result must carry
}

func str(s string) *string { return &s }

// resultOf is the text/plain of the result, or a note that there is none.
func resultOf(ex *Execution) string {
	if ex.Result == nil {
		return fmt.Sprintf("<no result; error %v; stderr %q>", ex.Error, ex.Stderr)
	}
	return ex.Result.Plain()
}

func (w want) check(t *testing.T, ex *Execution) {
	t.Helper()
	if w.result == "" && ex.Result != nil {
		t.Errorf("result = %q, want none", resultOf(ex))
	}
	if w.result != "" && (ex.Result == nil || resultOf(ex) != w.result) {
		t.Errorf("result = %v, want %q (error %v)", ex.Result, w.result, ex.Error)
	}
	if w.stdout != nil && ex.Stdout != *w.stdout {
		t.Errorf("stdout = %q, want %q", ex.Stdout, *w.stdout)
	}
	if !strings.Contains(ex.Stdout, w.stdoutHas) {
		t.Errorf("stdout = %q, want it to contain %q", ex.Stdout, w.stdoutHas)
	}
	if !strings.Contains(ex.Stderr, w.stderrHas) {
		t.Errorf("stderr = %q, want it to contain %q", ex.Stderr, w.stderrHas)
	}
	switch {
	case w.errName == "" && ex.Error != nil:
		t.Errorf("error = %v %q, want none", ex.Error, ex.Error.Traceback)
	case w.errName != "" && (ex.Error == nil || ex.Error.Name != w.errName):
		t.Errorf("error = %v, want %s", ex.Error, w.errName)
	case w.errName != "":
		if !strings.Contains(ex.Error.Value, w.errValueHas) {
			t.Errorf("error value = %q, want it to contain %q", ex.Error.Value, w.errValueHas)
		}
		tb := strings.Join(ex.Error.Traceback, "\n")
		for _, s := range w.tracebackHas {
			if !strings.Contains(tb, s) {
				t.Errorf("traceback lacks %q:\n%s", s, tb)
			}
		}
		for _, s := range w.tracebackNot {
			if strings.Contains(tb, s) {
				t.Errorf("traceback has %q:\n%s", s, tb)
			}
		}
	}
	for _, m := range w.mimes {
		if ex.Result == nil || len(ex.Result.Data[m]) == 0 {
			t.Errorf("result lacks %s", m)
		}
	}
}

// TestNotebookSemantics runs, in one shared context, the cases checked
// against ipykernel in issue 4 and the other notebook behaviours.
func TestNotebookSemantics(t *testing.T) {
	k := newKernel(t, testOptions(t))
	cases := []struct {
		name  string
		setup []string // cells run before, in the same context
		code  string
		needs []string
		want  want
	}{
		{name: "final expression is the result", code: "1+2+3", want: want{result: "6"}},
		{name: "assignment has no result", code: "x = 5", want: want{stdout: str("")}},
		{name: "semicolon suppresses the result", setup: []string{"x = 5"}, code: "x;"},
		{name: "semicolon before a comment suppresses", setup: []string{"x = 5"}, code: "x;  # quiet"},
		{name: "comment after the expression keeps the result", setup: []string{"x = 5"}, code: "x  # loud", want: want{result: "5"}},
		{name: "None is not shown", code: "None"},
		{name: "a call returning None is not shown", code: "print('hi')", want: want{stdout: str("hi\n")}},
		{name: "print then expression", code: "print('a'); 5", want: want{result: "5", stdout: str("a\n")}},
		{name: "sys.stdout.write without newline", code: "import sys; sys.stdout.write('no newline')",
			want: want{result: "10", stdout: str("no newline")}},
		{name: "string result is its repr", code: "'a' + 'b'", want: want{result: "'ab'"}},
		{name: "result of a multi-line cell", code: "def sq(v):\n    return v * v\n\nsq(7)", want: want{result: "49"}},
		{name: "underscore holds the last result", setup: []string{"40 + 2"}, code: "_", want: want{result: "42"}},
		{name: "state persists across runs", setup: []string{"counter = 1", "counter += 1"}, code: "counter",
			want: want{result: "2"}},
		{name: "division by zero", code: "1/0", want: want{errName: "ZeroDivisionError", errValueHas: "division by zero",
			tracebackHas: []string{"Traceback (most recent call last):", "<cell", "1/0"},
			tracebackNot: []string{"sandboxkit-driver", "_execute"}}},
		{name: "undefined name", code: "undefined_name_xyz", want: want{errName: "NameError",
			errValueHas: "undefined_name_xyz"}},
		{name: "syntax error is reported cleanly", code: "def g(:", want: want{errName: "SyntaxError",
			tracebackHas: []string{"def g(:", "^"}, tracebackNot: []string{"Traceback (most recent call last)", "sandboxkit-driver"}}},
		{name: "traceback shows the user's frames across cells",
			setup: []string{"def inner():\n    return {}['missing']\n\ndef outer():\n    return inner()"},
			code:  "outer()",
			want: want{errName: "KeyError", tracebackHas: []string{"in outer", "in inner", "return {}['missing']"},
				tracebackNot: []string{"sandboxkit-driver", "run_cell", "_evaluate"}}},
		{name: "a __repr__ that raises is an error",
			code: "class Bad:\n    def __repr__(self):\n        raise ValueError('no repr')\nBad()",
			want: want{errName: "ValueError", errValueHas: "no repr", tracebackHas: []string{"raise ValueError('no repr')"}}},
		{name: "context is usable after an error", setup: []string{"good = 'yes'", "1/0"}, code: "good",
			want: want{result: "'yes'"}},
		{name: "an object whose __getattr__ raises still shows its repr",
			code: "class Odd:\n    def __getattr__(self, name):\n        raise RuntimeError(name)\n    def __repr__(self):\n        return 'Odd()'\nOdd()",
			want: want{result: "Odd()"}},
		{name: "an exception whose str() fails is still reported",
			code: "class E(Exception):\n    def __str__(self):\n        raise ValueError()\nraise E()", want: want{errName: "E"}},
		{name: "chained exception keeps both parts",
			code: "try:\n    1/0\nexcept Exception as e:\n    raise RuntimeError('wrapped') from e",
			want: want{errName: "RuntimeError", tracebackHas: []string{"ZeroDivisionError", "direct cause", "wrapped"}}},
		{name: "stderr is separate", code: "import sys; print('out'); print('err', file=sys.stderr)",
			want: want{stdout: str("out\n"), stderrHas: "err\n"}},
		{name: "subprocess and os.system output is captured in order",
			code: "import os, subprocess, sys\nprint('1')\nsubprocess.run(['echo', '2'])\nos.system('echo 3')\n" +
				"sys.stdout.write('4\\n')\nos.system('echo 5 >&2');",
			want: want{stdout: str("1\n2\n3\n4\n"), stderrHas: "5\n"}},
		{name: "non-ASCII output survives chunking", code: "print('é' * 100000)",
			want: want{stdout: str(strings.Repeat("é", 100000) + "\n")}},
		{name: "100000 characters come back complete", code: "print('x'*100000)",
			want: want{stdout: str(strings.Repeat("x", 100000) + "\n")}},
		{name: "a forked child that runs off the end of the cell does not disturb the context",
			code: "import os\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\nelse:\n    os.waitpid(pid, 0)\n'parent'",
			want: want{result: "'parent'", stdout: str("child\n")}},
		{name: "multiprocessing pickles functions defined in cells",
			code: "from multiprocessing import Pool\ndef sq(v):\n    return v * v\nwith Pool(2) as pool:\n    r = pool.map(sq, range(4))\nr",
			want: want{result: "[0, 1, 4, 9]"}},
		{name: "top-level await", code: "import asyncio\nawait asyncio.sleep(0)\n42", want: want{result: "42"}},
		{name: "await of a coroutine defined earlier", setup: []string{"async def five():\n    return 5"},
			code: "await five()", want: want{result: "5"}},
		{name: "input raises at once", code: "input('name? ')", want: want{errName: "StdinNotImplementedError",
			errValueHas: "no stdin"}},
		{name: "getpass raises at once", code: "import getpass; getpass.getpass()", want: want{errName: "StdinNotImplementedError"}},
		{name: "stdin of the code is empty", code: "import sys; sys.stdin.read()", want: want{result: "''"}},
		{name: "shell line", code: "!echo from shell", want: want{stdout: str("from shell\n")}},
		{name: "shell line inside a block", code: "for i in range(2):\n    !echo loop\nprint('end')",
			want: want{stdout: str("loop\nloop\nend\n")}},
		{name: "shell output assigned to a name is a list of lines", code: "files = !printf 'a\\nb\\n'\nfiles",
			want: want{result: "['a', 'b']"}},
		{name: "valid Python starting with ! in a string is not rewritten", code: "s = '''\n!not a command\n'''\ns.strip()",
			want: want{result: "'!not a command'"}},
		{name: "bash cell magic", code: "%%bash\necho $((2 + 3))", want: want{stdout: str("5\n")}},
		{name: "writefile cell magic", setup: []string{"%%writefile notes.txt\nhello\n"}, code: "open('notes.txt').read()",
			want: want{result: "'hello\\n'"}},
		{name: "matplotlib inline magic is accepted", code: "%matplotlib inline\n1", want: want{result: "1"}},
		{name: "time magic times and returns the value", code: "%time 6 * 7", want: want{result: "42", stdoutHas: "Wall time: "}},
		{name: "time cell magic keeps the cell's result", code: "%%time\nv = 2\nv + 1", want: want{result: "3", stdoutHas: "Wall time: "}},
		{name: "timeit magic reports per loop", code: "%timeit 1 + 1", want: want{stdoutHas: "per loop"}},
		{name: "unknown magic is a clear error", code: "%load_ext autoreload", want: want{errName: "UsageError", errValueHas: "%pip"}},
		{name: "cwd is the workspace", code: "import os; os.path.basename(os.getcwd()) != ''", want: want{result: "True"}},
		{name: "matplotlib backend is forced to Agg", needs: []string{"matplotlib"},
			code: "import matplotlib; matplotlib.get_backend().lower()", want: want{result: "'agg'"}},
		{name: "numpy array repr", needs: []string{"numpy"}, code: "import numpy as np; np.arange(3)",
			want: want{result: "array([0, 1, 2])"}},
		{name: "pandas DataFrame is text and HTML", needs: []string{"pandas"},
			code: "import pandas as pd; pd.DataFrame({'a': [1, 2], 'b': [3, 4]})",
			want: want{result: "   a  b\n0  1  3\n1  2  4", mimes: []string{MIMEText, MIMEHTML}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			needModules(t, c.needs...)
			for _, s := range c.setup {
				run(t, k, s)
			}
			ex := run(t, k, c.code)
			c.want.check(t, ex)
		})
	}
}

func TestPipMagicRunsPipOfTheInterpreter(t *testing.T) {
	k := newKernel(t, testOptions(t))
	ex := run(t, k, "%pip --version")
	out := ex.Stdout + ex.Stderr
	// Either pip answers, or this very interpreter says it has no pip.
	if !strings.HasPrefix(ex.Stdout, "pip ") && !strings.Contains(out, testPython+": No module named pip") {
		t.Fatalf("%%pip --version printed %q", out)
	}
}

func TestExecutionCountRisesOverManyQuickCells(t *testing.T) {
	k := newKernel(t, testOptions(t))
	for i := 1; i <= 100; i++ {
		ex := run(t, k, fmt.Sprintf("v = %d; v", i))
		if ex.Count != i || ex.Result == nil || resultOf(ex) != fmt.Sprint(i) {
			t.Fatalf("cell %d: count %d result %v", i, ex.Count, ex.Result)
		}
	}
	// Errors count too, as in Jupyter.
	if ex := run(t, k, "1/0"); ex.Count != 101 {
		t.Fatalf("count after error cell = %d", ex.Count)
	}
	if k.ExecutionCount() != 101 {
		t.Fatalf("ExecutionCount = %d", k.ExecutionCount())
	}
}

func TestSystemExitKeepsTheContext(t *testing.T) {
	k := newKernel(t, testOptions(t))
	run(t, k, "kept = 'still here'")
	for _, c := range []struct{ code, value string }{
		{"import sys; sys.exit()", ""},
		{"import sys; sys.exit(3)", "3"},
		{"exit()", ""},
		{"quit(1)", "1"},
		{"raise SystemExit('bye')", "bye"},
	} {
		t.Run(c.code, func(t *testing.T) {
			ex := run(t, k, c.code)
			if !ex.Exited || ex.Error == nil || ex.Error.Name != "SystemExit" || ex.Error.Value != c.value {
				t.Fatalf("got Exited=%v Error=%+v", ex.Exited, ex.Error)
			}
			if got := run(t, k, "kept"); got.Result == nil || resultOf(got) != "'still here'" {
				t.Fatalf("state after exit: %+v", got)
			}
			if got := run(t, k, "import sys; sys.stdin.read()"); got.Error != nil {
				t.Fatalf("stdin after exit(): %v", got.Error)
			}
		})
	}
}

func TestStreamingDeliversChunksWhileCodeRuns(t *testing.T) {
	k := newKernel(t, testOptions(t))
	flag := filepath.Join(t.TempDir(), "seen")
	// The code waits until Go has seen its first line: only streaming can
	// make it print "streamed".
	code := fmt.Sprintf(`import os, time
print('first')
for _ in range(1000):
    if os.path.exists(%q):
        print('streamed')
        break
    time.sleep(0.01)
else:
    print('not streamed')`, flag)
	var got []Output
	ex, err := k.Run(context.Background(), code, RunOptions{Timeout: 30 * time.Second, OnOutput: func(o Output) {
		got = append(got, o)
		if o.Kind == Stdout && strings.Contains(o.Text, "first") {
			_ = os.WriteFile(flag, nil, 0o600)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Stdout != "first\nstreamed\n" {
		t.Fatalf("stdout = %q", ex.Stdout)
	}
	var joined string
	for _, o := range got {
		joined += o.Text
	}
	if joined != ex.Stdout {
		t.Fatalf("chunks %q do not add up to stdout %q", joined, ex.Stdout)
	}
}

// richObject offers every representation a notebook knows.
const richObject = `import base64
PNG = base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')
class Rich:
    def __repr__(self): return 'Rich()'
    def _repr_png_(self): return PNG
    def _repr_jpeg_(self): return b'\xff\xd8\xff'
    def _repr_svg_(self): return '<svg/>'
    def _repr_html_(self): return '<b>rich</b>'
    def _repr_markdown_(self): return '**rich**'
    def _repr_json_(self): return {'rich': True}
    def _repr_latex_(self): return r'$\rho$'
`

func TestRichOutputs(t *testing.T) {
	k := newKernel(t, testOptions(t))
	run(t, k, richObject)
	t.Run("result carries every representation", func(t *testing.T) {
		ex := run(t, k, "Rich()")
		if ex.Result == nil {
			t.Fatalf("no result: %+v", ex)
		}
		d := ex.Result.Data
		want := map[string]string{MIMEText: "Rich()", MIMESVG: "<svg/>", MIMEHTML: "<b>rich</b>",
			MIMEMarkdown: "**rich**", MIMEJSON: `{"rich": true}`, MIMELaTeX: `$\rho$`, MIMEJPEG: "\xff\xd8\xff"}
		for mime, v := range want {
			if string(d[mime]) != v {
				t.Errorf("%s = %q, want %q", mime, d[mime], v)
			}
		}
		if !bytes.HasPrefix(d[MIMEPNG], []byte("\x89PNG\r\n")) {
			t.Errorf("png is not raw PNG bytes: %q", d[MIMEPNG])
		}
	})
	t.Run("display calls come in order with prints", func(t *testing.T) {
		var order []string
		ex, err := k.Run(context.Background(), "print('before')\ndisplay(Rich())\nprint('after')\ndisplay(1, 'two')",
			RunOptions{Timeout: 10 * time.Second, OnOutput: func(o Output) {
				// A print may arrive in several chunks: join adjacent ones.
				if n := len(order); n > 0 && o.Kind == Stdout && strings.HasPrefix(order[n-1], "stdout:") {
					order[n-1] += o.Text
					return
				}
				order = append(order, string(o.Kind)+":"+o.Plain())
			}})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(order, "|"); got != "stdout:before\n|display:Rich()|stdout:after\n|display:1|display:'two'" {
			t.Fatalf("order = %q", got)
		}
		if len(ex.Outputs) != 3 || string(ex.Outputs[0].Data[MIMEHTML]) != "<b>rich</b>" || ex.Result != nil {
			t.Fatalf("outputs = %+v result %v", ex.Outputs, ex.Result)
		}
	})
	t.Run("a failing rich repr is a warning, not an error", func(t *testing.T) {
		ex := run(t, k, "class Half:\n    def _repr_html_(self):\n        raise RuntimeError('boom')\n    def __repr__(self):\n        return 'Half()'\nHalf()")
		if ex.Error != nil || ex.Result == nil || resultOf(ex) != "Half()" || ex.Result.Data[MIMEHTML] != nil {
			t.Fatalf("got %+v", ex)
		}
		if !strings.Contains(ex.Stderr, "_repr_html_") {
			t.Fatalf("stderr = %q", ex.Stderr)
		}
	})
	t.Run("matplotlib figures on show and at the end", func(t *testing.T) {
		needModules(t, "matplotlib")
		ex := run(t, k, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nprint('between')\nplt.figure()\nplt.bar([1], [2]);")
		if len(ex.Outputs) != 2 {
			t.Fatalf("want 2 figures, got %d: %+v (stderr %q, error %v)", len(ex.Outputs), ex.Outputs, ex.Stderr, ex.Error)
		}
		for _, o := range ex.Outputs {
			if !bytes.HasPrefix(o.Data[MIMEPNG], []byte("\x89PNG")) || !strings.Contains(o.Plain(), "Figure") {
				t.Fatalf("figure output = %q", o.Plain())
			}
		}
		if ex.Stdout != "between\n" || ex.Stderr != "" {
			t.Fatalf("stdout %q stderr %q", ex.Stdout, ex.Stderr)
		}
		if again := run(t, k, "len(plt.get_fignums())"); resultOf(again) != "0" {
			t.Fatalf("figures left open: %s", resultOf(again))
		}
		if failed := run(t, k, "plt.plot([1, 2])\n1/0"); len(failed.Outputs) != 1 || failed.Error == nil {
			t.Fatalf("figure of a failing cell: %d outputs, error %v", len(failed.Outputs), failed.Error)
		}
	})
	t.Run("IPython display objects", func(t *testing.T) {
		needModules(t, "IPython")
		ex := run(t, k, "from IPython.display import display, HTML\ndisplay(HTML('<i>x</i>'))")
		if len(ex.Outputs) != 1 || string(ex.Outputs[0].Data[MIMEHTML]) != "<i>x</i>" {
			t.Fatalf("outputs %+v stdout %q", ex.Outputs, ex.Stdout)
		}
	})
}

func TestInterrupts(t *testing.T) {
	t.Run("timeout interrupts and state survives", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		ex, err := k.Run(context.Background(), "import time\ny = 41; time.sleep(30)", RunOptions{Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if !ex.TimedOut || ex.StateLost || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("got %+v", ex)
		}
		if !strings.Contains(strings.Join(ex.Error.Traceback, "\n"), "time.sleep(30)") {
			t.Fatalf("traceback does not show where: %q", ex.Error.Traceback)
		}
		if got := run(t, k, "y + 1"); got.Result == nil || resultOf(got) != "42" {
			t.Fatalf("y + 1 = %+v", got)
		}
	})
	t.Run("timeout interrupts a shell command and top-level await", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		// Imported first: under load the 300 ms interrupt could land inside `import asyncio`,
		// and Python leaves an interrupted package import half made (a later import of it
		// fails with NameError: name 'base_events' is not defined), which is not what this
		// test is about.
		run(t, k, "import asyncio, subprocess")
		for _, code := range []string{"!sleep 30", "await asyncio.sleep(30)", "subprocess.run(['sleep', '30'])"} {
			ex, err := k.Run(context.Background(), code, RunOptions{Timeout: 300 * time.Millisecond})
			if err != nil || !ex.TimedOut || ex.StateLost {
				t.Fatalf("%q: %+v %v", code, ex, err)
			}
		}
		// The cancelled coroutine must not wake up in a later run.
		if got := run(t, k, "import asyncio\nawait asyncio.sleep(0.05)\nlen([t for t in asyncio.all_tasks() if not t.done()])"); resultOf(got) != "1" {
			t.Fatalf("pending tasks: %s", resultOf(got))
		}
	})
	cases := []struct{ name, code string }{
		{"code that swallows KeyboardInterrupt", "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except BaseException:\n        pass"},
		{"code that ignores SIGINT", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)"},
		{"a long C call", "sum(range(10**12))"},
	}
	for _, c := range cases {
		t.Run(c.name+" is killed and the context restarted", func(t *testing.T) {
			k := newKernel(t, testOptions(t))
			run(t, k, "z = 1")
			pid := k.Info().PID
			ex, err := k.Run(context.Background(), c.code, RunOptions{Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if !ex.TimedOut || !ex.StateLost || !strings.Contains(ex.Stderr, "state") {
				t.Fatalf("got %+v", ex)
			}
			if k.Info().PID == pid {
				t.Fatalf("still the same process %d", pid)
			}
			if got := run(t, k, "z"); got.Error == nil || got.Error.Name != "NameError" {
				t.Fatalf("old state visible after restart: %+v", got)
			}
			if got := run(t, k, "1 + 1"); resultOf(got) != "2" || got.Count != 4 {
				t.Fatalf("after restart: %+v", got)
			}
		})
	}
	t.Run("cancelling the context interrupts and keeps state", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		ex, err := k.Run(ctx, "w = 7\nimport time; time.sleep(30)", RunOptions{})
		if !errors.Is(err, context.DeadlineExceeded) || ex == nil || !ex.Interrupted || ex.StateLost {
			t.Fatalf("got %+v, %v", ex, err)
		}
		if got := run(t, k, "w"); resultOf(got) != "7" {
			t.Fatalf("w = %+v", got)
		}
	})
}

func TestEnvAndDir(t *testing.T) {
	o := testOptions(t)
	k := newKernel(t, o)
	ex, err := k.Run(context.Background(), "import os\nprint(os.environ['RUN_ONLY'])\n!echo shell:$RUN_ONLY",
		RunOptions{Env: map[string]string{"RUN_ONLY": "v1", "HOME": "/elsewhere"}})
	if err != nil || ex.Stdout != "v1\nshell:v1\n" {
		t.Fatalf("got %+v %v", ex, err)
	}
	if got := run(t, k, "os.environ.get('RUN_ONLY'), os.environ['HOME'] != '/elsewhere'"); resultOf(got) != "(None, True)" {
		t.Fatalf("per-run env leaked: %s", resultOf(got))
	}
	if got := run(t, k, "os.getcwd()"); resultOf(got) != "'"+o.Dir+"'" {
		t.Fatalf("cwd = %s, want %q", resultOf(got), o.Dir)
	}
	if got := run(t, k, "import os; sorted(k for k in os.environ if k not in ('MPLBACKEND', 'LC_CTYPE'))"); resultOf(got) != "['HOME', 'LANG', 'MPLCONFIGDIR', 'PATH']" {
		t.Fatalf("environment is not exactly Options.Env: %s", resultOf(got))
	}
	if _, err := k.Run(context.Background(), "1", RunOptions{Env: map[string]string{"A=B": "x"}}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad env key: %v", err)
	}
	if got := run(t, k, "2"); resultOf(got) != "2" {
		t.Fatalf("after bad request: %+v", got)
	}
}

func TestOutputLimit(t *testing.T) {
	o := testOptions(t)
	o.MaxOutputBytes = 1000
	k := newKernel(t, o)
	cases := []struct {
		name    string
		code    string
		dropped int64
	}{
		{"print is cut with a marker", "print('x'*100000)", 100001 - 1000},
		{"a child process flood is cut", "!head -c 5000000 /dev/zero | tr '\\0' y", 5000000 - 1000},
		{"a background process that never stops writing does not stall the run",
			"import subprocess\nflood = subprocess.Popen(['yes'])\nimport time; time.sleep(0.2)", -1},
		{"50 MB from Python stays bounded", "import sys\nfor _ in range(50):\n    sys.stdout.write('z' * 1000000)", 50000000 - 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ex := run(t, k, c.code)
			if c.dropped < 0 { // unknown amount
				if ex.DroppedBytes <= 0 || !strings.Contains(ex.Stdout, "bytes) left out here") {
					t.Fatalf("dropped %d, stdout %q", ex.DroppedBytes, ex.Stdout)
				}
				if after := run(t, k, "flood.kill(); flood.wait(); 'stopped'"); resultOf(after) != "'stopped'" {
					t.Fatalf("after the flood: %s", resultOf(after))
				}
				return
			}
			if ex.DroppedBytes != c.dropped {
				t.Fatalf("dropped %d, want %d", ex.DroppedBytes, c.dropped)
			}
			marker := fmt.Sprintf("%d bytes) left out here", c.dropped)
			if !strings.Contains(ex.Stdout, marker) || len(ex.Stdout) > 1000+300 {
				t.Fatalf("stdout (%d bytes) lacks %q: ...%q", len(ex.Stdout), marker, ex.Stdout[max(0, len(ex.Stdout)-300):])
			}
		})
	}
	t.Run("a huge repr is cut too", func(t *testing.T) {
		ex := run(t, k, "list(range(10**6))")
		if ex.Result == nil || len(resultOf(ex)) > 2000 || !strings.Contains(resultOf(ex), "truncated") {
			t.Fatalf("result %d bytes", len(resultOf(ex)))
		}
	})
}

func TestDisplayLimit(t *testing.T) {
	o := testOptions(t)
	o.MaxDisplayBytes = 10000
	k := newKernel(t, o)
	ex := run(t, k, "for i in range(5):\n    display({'text/plain': 'x' * 4000}, raw=True)")
	if len(ex.Outputs) != 2 || ex.DroppedOutputs != 3 {
		t.Fatalf("kept %d dropped %d", len(ex.Outputs), ex.DroppedOutputs)
	}
}

func TestLifecycle(t *testing.T) {
	t.Run("contexts are independent", func(t *testing.T) {
		a, b := newKernel(t, testOptions(t)), newKernel(t, testOptions(t))
		run(t, a, "only_a = 1")
		if got := run(t, b, "only_a"); got.Error == nil || got.Error.Name != "NameError" {
			t.Fatalf("b sees a's state: %+v", got)
		}
	})
	t.Run("a process that dies is reported and can be restarted", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		ex, err := k.Run(context.Background(), "print('bye')\nimport os, time\ntime.sleep(0.5)  # output written long before the death is kept\nos._exit(7)", RunOptions{})
		if !errors.Is(err, ErrDied) || !strings.Contains(err.Error(), "exit code 7") || ex == nil || !ex.StateLost || ex.Stdout != "bye\n" {
			t.Fatalf("got %+v, %v", ex, err)
		}
		if _, err := k.Run(context.Background(), "1", RunOptions{}); !errors.Is(err, ErrDied) {
			t.Fatalf("run on a dead kernel: %v", err)
		}
		if err := k.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := run(t, k, "1"); resultOf(got) != "1" || got.Count != 1 {
			t.Fatalf("after restart: %+v", got)
		}
	})
	t.Run("restart clears state and count", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		run(t, k, "gone = 1")
		if err := k.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := run(t, k, "'gone' in globals()"); resultOf(got) != "False" || got.Count != 1 {
			t.Fatalf("after restart: %+v", got)
		}
	})
	t.Run("closed kernel refuses work", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := k.Run(context.Background(), "1", RunOptions{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Run after Close: %v", err)
		}
		if err := k.Restart(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Restart after Close: %v", err)
		}
	})
	t.Run("Close during a run ends it", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		go func() { time.Sleep(100 * time.Millisecond); _ = k.Close() }()
		if _, err := k.Run(context.Background(), "import time; time.sleep(30)", RunOptions{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Run during Close: %v", err)
		}
	})
	t.Run("code that breaks the driver's plumbing leaves the context usable", func(t *testing.T) {
		k := newKernel(t, testOptions(t))
		for _, code := range []string{
			"import sys; sys.stdout = None", "import sys; sys.stdout.close()", "import sys; sys.stderr = open('/dev/null', 'w')",
			"x = '\x00'", "import os; os.close(1); os.close(2)", "import os; os.dup2(os.open(os.devnull, os.O_WRONLY), 1)", "import threading; threading.Thread(target=lambda: print('late'), daemon=True).start()",
		} {
			run(t, k, code)
		}
		if got := run(t, k, "print('ok'); 3"); got.Stdout != "ok\n" || got.Result == nil || resultOf(got) != "3" {
			t.Fatalf("after abuse: %+v", got)
		}
	})
}

func TestStartErrors(t *testing.T) {
	cases := []struct {
		name, python, errHas string
	}{
		{"missing interpreter", "/nonexistent/python3", "nonexistent"},
		{"not a Python", "/bin/false", "exited before the kernel driver was ready"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(t)
			o.Python = c.python
			_, err := Start(context.Background(), ExecProc, o)
			if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), c.errHas) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	t.Run("old Python is refused with a reason", func(t *testing.T) {
		fake := filepath.Join(t.TempDir(), "python2")
		script := "#!/bin/sh\nexec " + testPython + " -c 'import sys; sys.version_info = (2, 7); sys.version = \"2.7.18\"; exec(sys.argv[2])' -c \"$3\"\n"
		if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		o := testOptions(t)
		o.Python = fake
		_, err := Start(context.Background(), ExecProc, o)
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "needs Python >= 3.8") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestForgedProtocolIsBounded plays hostile code that writes to the driver's
// private protocol fd: the Go side must still bound what it keeps, skip
// over-long lines and ignore a forged end of run.
func TestForgedProtocolIsBounded(t *testing.T) {
	o := testOptions(t)
	o.MaxOutputBytes = 1000
	o.MaxDisplayBytes = 10000
	k := newKernel(t, o)
	code := `import json, os
fd = display.__globals__['_proto_out']
def forge(obj):
    os.write(fd, (json.dumps(obj) + '\n').encode())
forge({'t': 'out', 'n': 'stdout', 'd': 'F' * 100000})
forge({'t': 'done', 'n': 999, 'status': 'ok'})
os.write(fd, b'garbage that is not a message\n')
forge({'t': 'display', 'data': {'text/plain': 'D' * 50000}})
os.write(fd, b'{"t":"out","n":"stdout","d":"' + b'L' * 3000000 + b'"}\n')
print('real')
'done'`
	ex := run(t, k, code)
	if resultOf(ex) != "'done'" || ex.Count != 1 {
		t.Fatalf("the real end of run was not used: %+v", ex)
	}
	if !strings.HasPrefix(ex.Stdout, strings.Repeat("F", 1000)+"\n[sandboxkit: output truncated") || len(ex.Stdout) > 1300 {
		t.Fatalf("stdout not bounded: %d bytes", len(ex.Stdout))
	}
	if ex.DroppedBytes != int64(100000-1000+len("real\n")) || ex.DroppedOutputs != 2 {
		t.Fatalf("dropped %d bytes, %d outputs", ex.DroppedBytes, ex.DroppedOutputs)
	}
	if got := run(t, k, "1 + 1"); resultOf(got) != "2" {
		t.Fatalf("after forgery: %+v", got)
	}
}

// TestLongOutputKeepsItsEndAndTheFileAll: past the budget the kernel kept the start and dropped
// the rest, so the end of a long run (its error, its summary) was lost. Now each stream keeps
// its start and its end around an Omitted marker, and the OutputFile holds every byte, both
// streams in the order written.
func TestLongOutputKeepsItsEndAndTheFileAll(t *testing.T) {
	o := testOptions(t)
	o.MaxOutputBytes = 4000
	k := newKernel(t, o)
	file := filepath.Join(t.TempDir(), "sub", "out.txt")
	code := "import sys\nfor i in range(1, 100001):\n    print(i)\nprint('the end', file=sys.stderr)"
	ex, err := k.Run(context.Background(), code, RunOptions{Timeout: 20 * time.Second, OutputFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ex.Stdout, "1\n2\n") || !strings.HasSuffix(ex.Stdout, "\n99999\n100000\n") || ex.Stderr != "the end\n" {
		t.Fatalf("stdout %q…%q, stderr %q", ex.Stdout[:10], ex.Stdout[len(ex.Stdout)-20:], ex.Stderr)
	}
	var om *Omission
	for _, o := range ex.Timeline {
		if o.Kind == Omitted {
			om = o.Omission
		}
	}
	if om == nil || om.Stream != Stdout || om.Bytes != ex.DroppedBytes {
		t.Fatalf("omission %+v, dropped %d", om, ex.DroppedBytes)
	}
	kept := strings.Count(ex.Stdout, "\n") - 2 // the marker's own newlines
	if int64(kept)+om.Lines != 100000 {
		t.Errorf("%d lines kept + %d omitted != 100000", kept, om.Lines)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 100001 || !strings.HasSuffix(string(data), "100000\nthe end\n") {
		t.Errorf("the file has %d lines, ends %q; want 100001 ending in the end", n, data[max(0, len(data)-20):])
	}
	if ex.OutputFileBytes != int64(len(data)) || ex.OutputFileCut != 0 || ex.OutputFileError != "" {
		t.Errorf("file report %d/%d/%q, file %d bytes", ex.OutputFileBytes, ex.OutputFileCut, ex.OutputFileError, len(data))
	}
	// A cap is counted, and a file that cannot be made is said.
	ex, _ = k.Run(context.Background(), "print('x' * 10000)", RunOptions{OutputFile: file, OutputFileLimit: 100})
	if ex.OutputFileBytes != 100 || ex.OutputFileCut != 9901 {
		t.Errorf("capped file: %d bytes, %d cut", ex.OutputFileBytes, ex.OutputFileCut)
	}
	ex, _ = k.Run(context.Background(), "print(1)", RunOptions{OutputFile: "/proc/nope/out.txt"})
	if ex.OutputFileError == "" {
		t.Errorf("an unwritable file was not reported")
	}
}
