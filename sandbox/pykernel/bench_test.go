package pykernel

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The benchmarks compare the kernel with the floor a user would otherwise
// pay: a real Jupyter kernel (Debian's ipykernel) driven by jupyter_client.
// Targets (issue 4): round trip >= 8x faster than Jupyter, start <= 100 ms.
//
//	go test -run '^$' -bench . ./sandbox/pykernel/

// BenchmarkRoundTrip times `x+1` in a warm context.
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("pykernel", func(b *testing.B) {
		k := newKernel(b, testOptions(b))
		run(b, k, "x = 1")
		for b.Loop() {
			ex, err := k.Run(context.Background(), "x+1", RunOptions{})
			if err != nil || ex.Result == nil || ex.Result.Plain() != "2" {
				b.Fatalf("x+1: %+v %v", ex, err)
			}
		}
	})
	b.Run("jupyter", func(b *testing.B) {
		j := startJupyter(b)
		j.do(b, "start")
		defer j.do(b, "stop")
		j.do(b, "exec x = 1")
		for b.Loop() {
			if got := j.do(b, "exec x+1"); got != "ok ok" {
				b.Fatalf("jupyter: %q", got)
			}
		}
	})
}

// BenchmarkStart times starting a context until it can run code.
func BenchmarkStart(b *testing.B) {
	b.Run("pykernel", func(b *testing.B) {
		o := testOptions(b)
		for b.Loop() {
			k, err := Start(context.Background(), ExecProc, o)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = k.Close()
			b.StartTimer()
		}
	})
	b.Run("jupyter", func(b *testing.B) {
		j := startJupyter(b)
		for b.Loop() {
			j.do(b, "start")
			b.StopTimer()
			j.do(b, "stop")
			b.StartTimer()
		}
	})
}

type jupyter struct {
	in  io.WriteCloser
	out *bufio.Reader
}

// startJupyter starts the client script; it skips (or fails under
// SANDBOXKIT_REQUIRE=python) when ipykernel or jupyter_client is missing.
func startJupyter(b *testing.B) *jupyter {
	b.Helper()
	needModules(b, "ipykernel", "jupyter_client")
	home := b.TempDir()
	cmd := exec.Command(testPython, "testdata/jupyter_bench.py")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "JUPYTER_RUNTIME_DIR=" + home + "/rt",
		"PYDEVD_DISABLE_FILE_VALIDATION=1"} // silences a debugger warning of ipykernel
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	return &jupyter{in: in, out: bufio.NewReader(out)}
}

func (j *jupyter) do(b *testing.B, cmd string) string {
	if _, err := fmt.Fprintln(j.in, cmd); err != nil {
		b.Fatal(err)
	}
	line, err := j.out.ReadString('\n')
	if err != nil {
		b.Fatalf("jupyter client: %v", err)
	}
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "ok") {
		b.Fatalf("jupyter client: %q", line)
	}
	return line
}

// BenchmarkNewContext times a new context until it can run code (issue 22:
// with numpy and pandas imported, <= 10 ms): a context forked from a
// template that imported them (Options.Imports with Contexts, the template
// started beforehand), against, in the same run (every iteration runs each
// variant, rotating which goes first, so all see the same machine):
//
//   - bare: a context started afresh without imports (the interpreter's
//     start plus the driver);
//   - imports-afresh: a context started afresh that imports numpy and pandas
//     before it is ready (what a context costs without a template);
//   - floor-fork: os.fork() of an interpreter that imported them, until the
//     child has written a byte back (a fork's own cost: copying the page
//     tables of ~60 MB);
//   - floor-stub: starting and reaping `sleep 0`, the process every forked
//     context stands in for (stubArgv).
//
// It reports the median of each (<name>-ms) and the ratios forked/<name>
// (x-<name>). The template keeps a spare child forked ahead, so the fork is
// not on a context's path: the floor that remains is the stub's start.
//
//	go test -run '^$' -bench NewContext -benchtime 20x ./sandbox/pykernel/
func BenchmarkNewContext(b *testing.B) {
	mods := []string{"numpy", "pandas"}
	needModules(b, mods...)
	ctx := context.Background()
	bare := testOptions(b)
	imports := testOptions(b)
	imports.Imports = mods
	c := NewContexts(ExecProc, imports, 8)
	defer c.Close()
	if err := c.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	start := func(o Options) func() func() {
		return func() func() {
			k, err := Start(ctx, ExecProc, o)
			if err != nil {
				b.Fatal(err)
			}
			return func() { _ = k.Close() }
		}
	}
	fork, stop := forkFloor(b, mods)
	defer stop()
	alternate(b, []variant{
		{"forked", func() func() {
			if err := c.Create(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
			return func() {
				if err := c.Remove(ctx, "bench"); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"bare", start(bare)},
		{"imports-afresh", start(imports)},
		{"floor-fork", func() func() { fork(); return nil }},
		{"floor-stub", func() func() {
			p, err := ExecProc(ctx, []string{stubArgv[0], "0"}, nil, "")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Wait(); err != nil {
				b.Fatal(err)
			}
			return nil
		}},
	})
}

// variant is one way of doing a benchmark's work; it returns its teardown
// (run outside the measured time) or nil.
type variant struct {
	name string
	run  func() (teardown func())
}

// alternate runs every variant once per iteration, rotating which goes
// first, and reports each one's median (<name>-ms) and the first one's
// ratio to each of the others (x-<name>). It is what
// sandboxtest.CompareWithFloors does, which this package's tests cannot
// import (sandboxtest imports sandbox, which imports pykernel).
func alternate(b *testing.B, vs []variant) {
	times := make([][]time.Duration, len(vs))
	i := 0
	for b.Loop() {
		for k := range vs {
			v := (i + k) % len(vs)
			t0 := time.Now()
			teardown := vs[v].run()
			times[v] = append(times[v], time.Since(t0))
			if teardown != nil {
				teardown()
			}
		}
		i++
	}
	if len(times[0]) == 0 {
		return
	}
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	first := med(times[0])
	b.ReportMetric(float64(first)/1e6, vs[0].name+"-ms")
	for k, v := range vs[1:] {
		m := med(times[k+1])
		b.ReportMetric(float64(m)/1e6, v.name+"-ms")
		if m > 0 {
			b.ReportMetric(float64(first)/float64(m), "x-"+v.name)
		}
	}
}

// forkFloor starts an interpreter that imported mods and returns a
// function that has it fork a child and waits for the child's byte.
func forkFloor(b *testing.B, mods []string) (fork func(), stop func()) {
	cmd := exec.Command(testPython, "-c", `import os, signal, sys
for m in sys.argv[1:]:
    __import__(m)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
os.write(1, b"r")
while os.read(0, 1):
    if os.fork() == 0:
        os.write(1, b"c")
        os._exit(0)
`)
	cmd.Args = append(cmd.Args, mods...)
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(out, buf); err != nil {
		b.Fatal(err)
	}
	return func() {
			if _, err := in.Write([]byte{'f'}); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(out, buf); err != nil || buf[0] != 'c' {
				b.Fatalf("fork: %q %v", buf, err)
			}
		}, func() {
			_ = in.Close()
			_ = cmd.Wait()
		}
}
