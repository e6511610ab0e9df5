package server

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// BenchmarkAgentSearchVsRipgrep is the agent's fs.search over the Go
// source tree, in this process, as the agent runs it (narrowed to one P
// between searches), against ripgrep on the same tree, alternated in the
// same run. Besides wall time it reports what load moves less: CPU time,
// context switches and garbage collections per search, for the agent and
// for ripgrep. It leaves out what the sandbox adds (Landlock, seccomp, the
// stream): sandbox's BenchmarkFloorSearchGoSrc measures the whole.
//
//	go test -run '^$' -bench AgentSearchVsRipgrep -benchtime 20x ./sandbox/agent/server
func BenchmarkAgentSearchVsRipgrep(b *testing.B) {
	const root, pattern = "/usr/local/go/src", `func New[A-Z]\w*Reader`
	if _, err := os.Stat(root); err != nil {
		b.Skip("no Go source tree at", root)
	}
	rg, _ := exec.LookPath("rg")
	w, err := openWorkspace(wire.Hello{Workspace: root})
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	prev := runtime.GOMAXPROCS(0)
	NarrowProcs()
	b.Cleanup(func() {
		procs.mu.Lock()
		procs.narrowed = false
		procs.mu.Unlock()
		runtime.GOMAXPROCS(prev)
	})
	var ours, oursCPU, oursCsw, oursGC, theirs, theirsCPU []float64
	var ms runtime.MemStats
	b.ReportAllocs()
	for b.Loop() {
		ru0 := rusage()
		runtime.ReadMemStats(&ms)
		gc0 := ms.NumGC
		t0 := time.Now()
		res, werr := w.search(b.Context(), wire.FSSearchRequest{Pattern: pattern, MaxResults: 100000})
		if werr != nil || len(res.(wire.FSSearchReply).Matches) == 0 {
			b.Fatalf("search: %v", werr)
		}
		ours = append(ours, float64(time.Since(t0))/1e6)
		ru1 := rusage()
		runtime.ReadMemStats(&ms)
		oursCPU = append(oursCPU, float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano())/1e6)
		oursCsw = append(oursCsw, float64(ru1.Nvcsw+ru1.Nivcsw-ru0.Nvcsw-ru0.Nivcsw))
		oursGC = append(oursGC, float64(ms.NumGC-gc0))
		if rg == "" {
			continue
		}
		cmd := exec.Command(rg, "-n", pattern, root)
		t0 = time.Now()
		if out, err := cmd.Output(); err != nil || len(out) == 0 {
			b.Fatalf("rg: %v", err)
		}
		theirs = append(theirs, float64(time.Since(t0))/1e6)
		theirsCPU = append(theirsCPU, float64(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())/1e6)
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(ours), "subject-ms")
	b.ReportMetric(med(oursCPU), "subject-cpu-ms")
	b.ReportMetric(med(oursCsw), "subject-csw")
	b.ReportMetric(med(oursGC), "subject-gc")
	if len(theirs) > 0 {
		b.ReportMetric(med(theirs), "rg-ms")
		b.ReportMetric(med(theirsCPU), "rg-cpu-ms")
		b.ReportMetric(med(ours)/med(theirs), "x-rg")
		b.ReportMetric(med(oursCPU)/med(theirsCPU), "x-rg-cpu")
	}
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}
