package pykernel

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
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
