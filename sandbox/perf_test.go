package sandbox_test

// Benchmarks against their floors in the same run (issue 2 targets: a
// command <= 2x a plain exec; a small read <= 200 µs; search <= 2x grep;
// issue 22: search <= 1.0x ripgrep).
// Each pairs the sandbox with its floor iteration by iteration and reports
// medians and the ratio (sandboxtest.CompareWithFloors):
//
//	go test -run '^$' -bench Floor -benchtime 300x ./sandbox
//	go test -run '^$' -bench FloorSearch -benchtime 5x ./sandbox

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/rgtest"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

func newBenchSandbox(b *testing.B, opts ...sandbox.Option) *sandbox.Sandbox {
	b.Helper()
	sb, err := sandbox.New(context.Background(), append([]sandbox.Option{sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Close() })
	return sb
}

// BenchmarkFloorCommandRun: Commands.Run("true") in a warm sandbox vs
// exec.Command("true").Run() from the host.
func BenchmarkFloorCommandRun(b *testing.B) {
	sb := newBenchSandbox(b)
	sandboxtest.CompareWithFloors(b, runTrueIn(sb), execTrueFloor)
}

// runTrueIn runs `true` in sb, searched on its PATH as execTrueFloor's is.
func runTrueIn(sb *sandbox.Sandbox) sandboxtest.Timed {
	return func(b *testing.B) func() {
		if _, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		return nil
	}
}

// execTrueFloor is a command's floor: exec.Command("true").Run().
var execTrueFloor = sandboxtest.Floor{Name: "exec", Run: func(b *testing.B) func() {
	if err := exec.Command("true").Run(); err != nil {
		b.Fatal(err)
	}
	return nil
}}

// read1KB is the set-up of the 1 KB read benchmarks: a sandbox holding
// k.bin (1 KB of zeros) and the same file on the host (hostPath).
type read1KB struct {
	sb       *sandbox.Sandbox
	data     []byte
	hostPath string
}

func newRead1KB(b *testing.B) *read1KB {
	b.Helper()
	r := &read1KB{sb: newBenchSandbox(b), data: make([]byte, 1024)}
	if err := r.sb.Files.Write(context.Background(), "k.bin", r.data, 0); err != nil {
		b.Fatal(err)
	}
	r.hostPath = filepath.Join(b.TempDir(), "k.bin")
	if err := os.WriteFile(r.hostPath, r.data, 0o644); err != nil {
		b.Fatal(err)
	}
	return r
}

// read reads k.bin in the sandbox, failing on an error or a short read.
func (r *read1KB) read(b *testing.B) {
	if got, err := r.sb.Files.ReadFile(context.Background(), "k.bin"); err != nil || len(got) != len(r.data) {
		b.Fatalf("ReadFile: %d bytes, %v", len(got), err)
	}
}

// floors are the read's floors: os.ReadFile of the host's copy, and the
// round trip of 1 KB through cat (catPipe).
func (r *read1KB) floors(b *testing.B) []sandboxtest.Floor {
	_, roundTrip := catPipe(b, len(r.data))
	return []sandboxtest.Floor{{Name: "osread", Run: func(b *testing.B) func() {
		if _, err := os.ReadFile(r.hostPath); err != nil {
			b.Fatal(err)
		}
		return nil
	}}, {Name: "pipe", Run: func(b *testing.B) func() {
		roundTrip(r.data)
		return nil
	}}}
}

// benchAgentPID returns the pid of sb's agent, skipping the benchmark on
// a backend that does not name it.
func benchAgentPID(b *testing.B, sb *sandbox.Sandbox) int {
	b.Helper()
	pid, err := strconv.Atoi(sb.Info().Extra["agent_pid"])
	if err != nil {
		b.Skip("the backend does not name its agent's process")
	}
	return pid
}

// BenchmarkFloorRead1KB: a 1 KB Files.ReadFile vs os.ReadFile, and vs
// the round trip of 1 KB through another process on a pipe (written to
// cat, read back): the cost of the stream itself, which a read in a
// sandbox pays on top of the file work, since the file is read by the
// agent inside the boundary.
func BenchmarkFloorRead1KB(b *testing.B) {
	r := newRead1KB(b)
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		r.read(b)
		return nil
	}, r.floors(b)...)
}

// catPipe starts cat, the floor of a round trip over a pipe, for the
// benchmark's duration: it returns cat's PID and a function that sends
// data (n bytes) through cat and reads it back.
func catPipe(b *testing.B, n int) (pid int, roundTrip func(data []byte)) {
	cat := exec.Command("cat")
	toCat, err := cat.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	fromCat, err := cat.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cat.Start(); err != nil {
		b.Skip("no cat to measure a pipe's round trip with:", err)
	}
	b.Cleanup(func() { toCat.Close(); cat.Wait() })
	echo := make([]byte, n)
	return cat.Process.Pid, func(data []byte) {
		if _, err := toCat.Write(data); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(fromCat, echo); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFloorSearchGoSrc: Files.Search over the Go source tree vs
// grep -rn (and ripgrep, if installed) with the same expression. It also
// reports the CPU time of the sandbox's agent and of ripgrep per search
// (the medians): on a loaded machine wall time compares how each was
// scheduled, CPU time the work each did.
func BenchmarkFloorSearchGoSrc(b *testing.B) {
	const root, pattern = "/usr/local/go/src", `func New[A-Z]\w*Reader`
	if _, err := os.Stat(root); err != nil {
		b.Skip("no Go source tree at", root)
	}
	sb := newBenchSandbox(b, sandbox.WithWorkspace(root))
	ctx := context.Background()
	agentPID, _ := strconv.Atoi(sb.Info().Extra["agent_pid"])
	agreeWithRipgrep(b, sb, root, pattern)
	var subjectCPU, rgCPU []time.Duration
	search := func(b *testing.B) func() {
		c0 := processCPU(agentPID)
		res, err := sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: pattern, MaxResults: 100000})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Matches) == 0 {
			b.Fatal("no match in the Go source tree")
		}
		if c0 >= 0 {
			subjectCPU = append(subjectCPU, processCPU(agentPID)-c0)
		}
		return nil
	}
	var floors []sandboxtest.Floor
	for _, tool := range [][]string{{"grep", "-rnE", `func New[A-Z][[:alnum:]_]*Reader`, root}, {"rg", "-n", pattern, root}} {
		if _, err := exec.LookPath(tool[0]); err != nil {
			continue
		}
		floors = append(floors, sandboxtest.Floor{Name: tool[0], Run: func(b *testing.B) func() {
			cmd := exec.Command(tool[0], tool[1:]...)
			if out, err := cmd.Output(); err != nil || len(out) == 0 {
				b.Fatalf("%s: %v", tool[0], err)
			}
			if tool[0] == "rg" {
				rgCPU = append(rgCPU, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
			}
			return nil
		}})
	}
	sandboxtest.CompareWithFloors(b, search, floors...)
	if len(subjectCPU) > 0 && len(rgCPU) > 0 {
		sc, rc := medianDuration(subjectCPU), medianDuration(rgCPU)
		b.ReportMetric(float64(sc)/1e6, "subject-cpu-ms")
		b.ReportMetric(float64(rc)/1e6, "rg-cpu-ms")
	}
}

// agreeWithRipgrep fails the benchmark unless the search finds the lines
// ripgrep finds (path and line number) when ripgrep also reads hidden and
// ignored files, as the search does: a faster search that finds fewer
// lines would be no win. (Timed, ripgrep runs with its defaults, which
// leave out the tree's 14 hidden files: less work for it.)
func agreeWithRipgrep(b *testing.B, sb *sandbox.Sandbox, root, pattern string) {
	rg, err := exec.LookPath("rg")
	if err != nil {
		return
	}
	want, err := rgtest.Lines(rg, root, pattern, false)
	if err != nil {
		b.Fatal(err)
	}
	var got []string
	res, err := sb.Files.Search(context.Background(), sandbox.SearchOptions{Pattern: pattern, MaxResults: 100000})
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range res.Matches {
		got = append(got, rgtest.Entry(m.Path, m.Line))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		b.Fatalf("the search found %d lines, ripgrep %d:\n%q\n%q", len(got), len(want), got, want)
	}
}

// processCPU is the CPU time process pid has used, in nanoseconds, the
// sum over its threads of the first field of /proc/PID/task/TID/schedstat
// (/proc/PID/stat counts 10 ms ticks, too coarse for one search); -1
// where there is no /proc.
func processCPU(pid int) time.Duration {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if pid <= 0 || err != nil {
		return -1
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // a thread that just ended
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(ns)
		}
	}
	return sum
}

func medianDuration(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
