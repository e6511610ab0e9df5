//go:build linux

package pykernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// forkSet returns contexts forked from a template that imported mods, with
// the template started.
func forkSet(t *testing.T, mods ...string) *Contexts {
	t.Helper()
	needPython(t)
	needModules(t, mods...)
	o := testOptions(t)
	o.Imports = mods
	c := NewContexts(ExecProc, o, 8)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Preload(ctx); err != nil {
		t.Fatalf("Preload: %v", err)
	}
	return c
}

func runIn(t *testing.T, c *Contexts, name, code string) *Execution {
	t.Helper()
	ex, err := c.Run(context.Background(), name, code, RunOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Run(%s, %q): %v", name, code, err)
	}
	if ex.Error != nil {
		t.Fatalf("Run(%s, %q): %v\n%s", name, code, ex.Error, strings.Join(ex.Error.Traceback, "\n"))
	}
	return ex
}

// TestForkedContextsStartWithTheImports: a context of a Contexts with
// Imports has the modules imported and bound, and is a child of the
// template (forked), not of this process (started afresh).
func TestForkedContextsStartWithTheImports(t *testing.T) {
	c := forkSet(t, "numpy", "pandas", "xml.dom")
	for _, name := range []string{"default", "second"} {
		if name != "default" {
			if err := c.Create(context.Background(), name); err != nil {
				t.Fatal(err)
			}
		}
		ex := runIn(t, c, name, "import os, sys\n"+
			"(os.getppid(), type(numpy.zeros(2)).__name__, pandas.DataFrame({'a': [1]}).shape, xml.dom.__name__, sys.argv)")
		want := "('ndarray', (1, 1), 'xml.dom', ['-c'])"
		got := resultOf(ex)
		ppid, rest, _ := strings.Cut(strings.TrimPrefix(got, "("), ", ")
		if "("+rest != want {
			t.Fatalf("%s: got %s, want (PPID, %s", name, got, strings.TrimPrefix(want, "("))
		}
		if ppid == strconv.Itoa(os.Getpid()) {
			t.Fatalf("%s: the context is a child of the test process (started afresh), not of the template", name)
		}
	}
}

// TestForkedContextsDoNotShareRandomState: two contexts forked from one
// template draw different numbers from Python's random and numpy's global
// generator (a fork copies the generators' state).
func TestForkedContextsDoNotShareRandomState(t *testing.T) {
	c := forkSet(t, "numpy", "random")
	draw := "(random.random(), float(numpy.random.rand()), int(numpy.random.randint(1 << 62)))"
	seen := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		if err := c.Create(context.Background(), name); err != nil {
			t.Fatal(err)
		}
		got := strings.Trim(resultOf(runIn(t, c, name, draw)), "()")
		for i, v := range strings.Split(got, ", ") {
			key := fmt.Sprintf("%d=%s", i, v)
			if other, ok := seen[key]; ok {
				t.Fatalf("contexts %s and %s drew the same number from generator %d: %s", other, name, i, v)
			}
			seen[key] = name
		}
	}
}

// TestForkedContextHoldsNoTemplateFD: a forked context holds none of the
// template's pipes (it could forge the template's protocol) and no more fds
// than a context started afresh, except the pidfd of its stand-in process.
func TestForkedContextHoldsNoTemplateFD(t *testing.T) {
	c := forkSet(t, "json")
	list := "import os\nfds = {}\nfor fd in os.listdir('/proc/self/fd'):\n" +
		"    try: fds[int(fd)] = os.readlink('/proc/self/fd/' + fd)\n    except OSError: pass\nfds"
	ex := runIn(t, c, "", list+"\n(os.getppid(), sorted(set(fds.values())))")
	tplPID, targets, _ := strings.Cut(strings.Trim(resultOf(ex), "()"), ", ")
	tplFDs, err := os.ReadDir("/proc/" + tplPID + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	// Pipes this test process passed down (a leaked fd of whatever started
	// `go test`) are in every context; the template's own are not.
	fresh := newKernel(t, testOptions(t))
	inFresh := resultOf(run(t, fresh, list+"\nsorted(set(fds.values()))"))
	for _, e := range tplFDs {
		l, err := os.Readlink(filepath.Join("/proc", tplPID, "fd", e.Name()))
		if err != nil || !strings.HasPrefix(l, "pipe:") || strings.Contains(inFresh, "'"+l+"'") {
			continue
		}
		if strings.Contains(targets, "'"+l+"'") {
			t.Errorf("the forked context holds the template's %s (its fd %s): %s", l, e.Name(), targets)
		}
	}
	a, _ := strconv.Atoi(resultOf(run(t, fresh, list+"\nlen(fds)")))
	b, _ := strconv.Atoi(resultOf(runIn(t, c, "", list+"\nlen(fds)")))
	if b != a+1 {
		t.Errorf("a forked context has %d fds, a fresh one %d: want one more (the pidfd)", b, a)
	}
}

// pidsOf lists the live (not zombie) children of this test process whose
// command line contains s (other tests on the machine may run the same
// programs).
func pidsOf(s string) []int { return procsWith(s, true) }

// procsWith lists the live processes whose command line contains s, only
// this process's children if children.
func procsWith(s string, children bool) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), s) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(stat), ')')
		if f := strings.Fields(string(stat[i+1:])); len(f) > 1 && (f[1] == self || !children) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForkedContextsLeaveNothingBehind: Remove ends a forked context and
// the processes it started, Close ends the template and the rest (its spare
// too); /proc shows no survivor.
func TestForkedContextsLeaveNothingBehind(t *testing.T) {
	// The template, its spare and its contexts all have the template's
	// command line; colorsys makes it this test's own.
	c := forkSet(t, "json", "colorsys")
	eventually(t, "the template and its spare run", func() bool { return len(procsWith("template\x00json\x00colorsys", false)) == 2 })
	mark := fmt.Sprintf("%d", time.Now().UnixNano()%1e9+1e9)
	start := "import os, subprocess\np = subprocess.Popen(['sleep', '" + mark + "'])\n(os.getpid(), os.getppid(), p.pid)"
	var pids [][3]int
	for _, name := range []string{"a", "b"} {
		if err := c.Create(context.Background(), name); err != nil {
			t.Fatal(err)
		}
		var p [3]int
		if _, err := fmt.Sscanf(resultOf(runIn(t, c, name, start)), "(%d, %d, %d)", &p[0], &p[1], &p[2]); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p)
	}
	if err := c.Remove(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "context a and its sleep are gone after Remove", func() bool { return !alive(pids[0][0]) && !alive(pids[0][2]) })
	if !alive(pids[1][0]) || !alive(pids[1][1]) {
		t.Fatal("Remove of a ended context b or the template")
	}
	runIn(t, c, "b", "1")
	_ = c.Close()
	eventually(t, "no process of the contexts is left after Close", func() bool {
		return !alive(pids[1][0]) && !alive(pids[1][1]) && !alive(pids[1][2]) &&
			len(procsWith(mark, false)) == 0 && len(pidsOf(strings.Join(stubArgv, "\x00"))) == 0 &&
			len(procsWith("template\x00json\x00colorsys", false)) == 0
	})
}

// TestForkedContextInterruptsAndDeaths: a timeout interrupts a forked
// context and keeps its state; a context that exits reports its exit code
// and comes back forked again with the imports; one that swallows the
// interrupt is killed and restarted.
func TestForkedContextInterruptsAndDeaths(t *testing.T) {
	c := forkSet(t, "json")
	ctx := context.Background()
	ex, err := c.Run(ctx, "", "import time\ny = 41\ntime.sleep(30)", RunOptions{Timeout: 500 * time.Millisecond})
	if err != nil || !ex.TimedOut || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" || ex.StateLost {
		t.Fatalf("timeout: %+v %v", ex, err)
	}
	if got := resultOf(runIn(t, c, "", "y + 1")); got != "42" {
		t.Fatalf("state after the interrupt: %s", got)
	}
	ex, err = c.Run(ctx, "", "print('bye')\nimport os, time\ntime.sleep(0.5)  # output written long before the death is kept\nos._exit(7)", RunOptions{})
	if !errors.Is(err, ErrDied) || !strings.Contains(err.Error(), "exit code 7") || ex == nil || ex.Stdout != "bye\n" {
		t.Fatalf("os._exit(7): %+v %v", ex, err)
	}
	ex = runIn(t, c, "", "'y' in dir(), json.dumps([1])")
	if got := resultOf(ex); got != "(False, '[1]')" || !ex.StateLost {
		t.Fatalf("after the death: %s (StateLost %v)", got, ex.StateLost)
	}
	ex, err = c.Run(ctx, "", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nz = 1\ntime.sleep(30)",
		RunOptions{Timeout: 300 * time.Millisecond})
	if err != nil || !ex.TimedOut || !ex.StateLost {
		t.Fatalf("swallowed interrupt: %+v %v", ex, err)
	}
	if got := resultOf(runIn(t, c, "", "'z' in dir(), json.__name__")); got != "(False, 'json')" {
		t.Fatalf("after the kill: %s", got)
	}
}

// TestTemplateDeathKillsAndRestartsContexts: when the template dies, its
// contexts die with it (their exits could not be reported) and come back
// forked from a new template.
func TestTemplateDeathKillsAndRestartsContexts(t *testing.T) {
	c := forkSet(t, "json")
	if err := c.Create(context.Background(), "other"); err != nil {
		t.Fatal(err)
	}
	var tpl, other int
	fmt.Sscan(resultOf(runIn(t, c, "other", "import os; os.getppid()")), &tpl)
	fmt.Sscan(resultOf(runIn(t, c, "other", "os.getpid()")), &other)
	if err := syscall.Kill(tpl, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the context dies with its template", func() bool { return !alive(other) })
	// The first run finds the process dead (as after any external kill),
	// the next one runs in a context forked from a new template.
	if _, err := c.Run(context.Background(), "other", "1", RunOptions{}); !errors.Is(err, ErrDied) {
		t.Fatalf("run on the context whose template died: %v", err)
	}
	ex := runIn(t, c, "other", "import os; os.getppid(), json.__name__")
	if got := resultOf(ex); !ex.StateLost || strings.HasPrefix(got, fmt.Sprintf("(%d,", tpl)) || !strings.HasSuffix(got, "'json')") {
		t.Fatalf("after the template died: %s (StateLost %v)", got, ex.StateLost)
	}
}

// TestTemplateImportErrorNamesTheModule: a module that cannot be imported
// fails the context's start with ErrImport naming it, leaves no process, and
// later starts try again.
func TestTemplateImportErrorNamesTheModule(t *testing.T) {
	needPython(t)
	o := testOptions(t)
	o.Imports = []string{"json", "sandboxkit_no_such_module"}
	c := NewContexts(ExecProc, o, 8)
	defer c.Close()
	for i := 0; i < 2; i++ {
		_, err := c.Run(context.Background(), "", "1", RunOptions{})
		if !errors.Is(err, ErrImport) || !strings.Contains(err.Error(), "import sandboxkit_no_such_module failed: ModuleNotFoundError") {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if len(c.List()) != 0 {
		t.Fatalf("a failed start left a context: %+v", c.List())
	}
	if n := pidsOf("sandboxkit_no_such_module"); len(n) != 0 {
		t.Fatalf("a failed template is still running: %v", n)
	}
	// The same error from a kernel started afresh with the imports.
	_, err := Start(context.Background(), ExecProc, o)
	if !errors.Is(err, ErrImport) || !strings.Contains(err.Error(), "sandboxkit_no_such_module") {
		t.Fatalf("Start: %v", err)
	}
}

// TestForkedContextUsesBLASThreads: numpy's BLAS thread pool, started in the
// template before the fork, works in a forked context (OpenBLAS shuts its
// pool down around fork and restarts it in the child: no deadlock).
func TestForkedContextUsesBLASThreads(t *testing.T) {
	c := forkSet(t, "numpy")
	ex := runIn(t, c, "", "a = numpy.ones((600, 600))\n"+
		"import os\nfloat((a @ a)[0, 0]), len(os.listdir('/proc/self/task')) >= 1")
	if got := resultOf(ex); got != "(600.0, True)" {
		t.Fatalf("matmul in a forked context: %s", got)
	}
}

// TestForkedContextsAfterTheirStubsWereKilled: killing the stand-in
// processes (`pkill sleep` in a context) ends the contexts they stood for
// (each restarts on its next run, StateLost) and the spare one; a new
// context still starts.
func TestForkedContextsAfterTheirStubsWereKilled(t *testing.T) {
	c := forkSet(t, "json")
	runIn(t, c, "", "x = 1")
	eventually(t, "a spare stub and the default context's stub run", func() bool { return len(pidsOf(strings.Join(stubArgv, "\x00"))) == 2 })
	stubs := pidsOf(strings.Join(stubArgv, "\x00"))
	for _, pid := range stubs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	eventually(t, "the stubs are dead", func() bool { return !alive(stubs[0]) && !alive(stubs[1]) })
	if err := c.Create(context.Background(), "after"); err != nil {
		t.Fatalf("Create after the stubs were killed: %v", err)
	}
	if got := resultOf(runIn(t, c, "after", "json.dumps(1)")); got != "'1'" {
		t.Fatalf("the new context: %s", got)
	}
	if _, err := c.Run(context.Background(), "", "x", RunOptions{}); !errors.Is(err, ErrDied) {
		t.Fatalf("the context whose stub was killed: %v", err)
	}
	if ex := runIn(t, c, "", "'x' in dir()"); resultOf(ex) != "False" || !ex.StateLost {
		t.Fatalf("the context after its restart: %s", resultOf(ex))
	}
}
