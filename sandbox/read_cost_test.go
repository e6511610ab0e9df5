//go:build linux

package sandbox_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRead1KBCost: what a 1 KB Files.ReadFile costs the machine,
// beside BenchmarkFloorRead1KB's wall time — the CPU time and the context
// switches per read of the two processes it takes (this one, the host,
// and the sandbox's agent), and the same for the pipe floor's round trip
// (this process, and cat). On a loaded machine wall time measures the
// scheduler; these move little with load, and they show what the sandbox
// spends above the stream's own cost:
//
//	go test -run '^$' -bench Read1KBCost -benchtime 20000x ./sandbox
//
// Metrics per read: host-cpu-us and peer-cpu-us (the agent, or cat),
// host-csw and peer-csw (voluntary and involuntary context switches, over
// every thread).
func BenchmarkRead1KBCost(b *testing.B) {
	data := make([]byte, 1024)
	b.Run("sandbox", func(b *testing.B) {
		r := newRead1KB(b)
		pid := benchAgentPID(b, r.sb)
		measureCost(b, pid, func() { r.read(b) })
	})
	b.Run("pipe", func(b *testing.B) {
		pid, roundTrip := catPipe(b, len(data))
		measureCost(b, pid, func() { roundTrip(data) })
	})
}

// measureCost runs op b.N times (after a warm-up) and reports the CPU time
// and context switches per op of this process and of process peer.
func measureCost(b *testing.B, peer int, op func()) {
	for range 200 {
		op()
	}
	p0, h0 := taskCost(peer), selfCost()
	b.ResetTimer()
	for b.Loop() {
		op()
	}
	b.StopTimer()
	p1, h1 := taskCost(peer), selfCost()
	n := float64(b.N)
	b.ReportMetric(float64(h1.cpu-h0.cpu)/n/1e3, "host-cpu-us")
	b.ReportMetric(float64(p1.cpu-p0.cpu)/n/1e3, "peer-cpu-us")
	b.ReportMetric(float64(h1.csw-h0.csw)/n, "host-csw")
	b.ReportMetric(float64(p1.csw-p0.csw)/n, "peer-csw")
}

type cost struct {
	cpu time.Duration
	csw int64
}

// selfCost is this process's CPU time and context switches.
func selfCost() cost {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cost{}
	}
	return cost{time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw}
}

// taskCost is process pid's CPU time (processCPU) and context switches,
// summed over its threads (/proc/PID/task/TID/status).
func taskCost(pid int) cost {
	c := cost{cpu: processCPU(pid)}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/status")
		if err != nil {
			continue // a thread that just ended
		}
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				c.csw += n
			}
		}
	}
	return c
}
