package sandboxtest

import (
	"slices"
	"testing"
	"time"
)

// Timed is one way of doing a benchmark's work. It may return a teardown
// (closing a sandbox, say), which runs outside the measured time.
type Timed func(b *testing.B) (teardown func())

// Floor is a cheapest way to do the same work without sandboxkit (a plain
// exec, os.ReadFile, grep, bubblewrap), named for the report.
type Floor struct {
	Name string
	Run  Timed
}

// CompareWithFloors benchmarks subject against its floors. Each iteration
// runs all of them, rotating which goes first, so that every variant sees
// the same machine: on a shared, loaded machine, separate benchmarks run
// one after the other compare two different loads. It reports the median
// time per op of the subject (subject-ms) and of each floor (<name>-ms),
// and the ratio subject/floor (x-<name>), which is what a target such as
// "at most 2x a plain exec" is checked against. ns/op counts everything.
func CompareWithFloors(b *testing.B, subject Timed, floors ...Floor) {
	b.Helper()
	compare(b, 0, subject, floors)
}

// CompareAfterIdle is CompareWithFloors with the machine left idle for
// idle (not measured) before each variant's run: the cost of a call that
// comes after a pause, as a model's calls do (each waits for the model's
// next turn), when the processes' threads sleep, caches are cold and, on
// a virtual machine, idle vCPUs are halted and slow to wake. Back-to-back
// iterations, which CompareWithFloors measures, hide that.
func CompareAfterIdle(b *testing.B, idle time.Duration, subject Timed, floors ...Floor) {
	b.Helper()
	compare(b, idle, subject, floors)
}

func compare(b *testing.B, idle time.Duration, subject Timed, floors []Floor) {
	b.Helper()
	variants := append([]Floor{{Name: "subject", Run: subject}}, floors...)
	times := make([][]time.Duration, len(variants))
	i := 0
	for b.Loop() {
		for k := range variants {
			v := (i + k) % len(variants)
			if idle > 0 {
				b.StopTimer()
				time.Sleep(idle)
				b.StartTimer()
			}
			t0 := time.Now()
			teardown := variants[v].Run(b)
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
	subj := median(times[0])
	b.ReportMetric(float64(subj)/1e6, "subject-ms")
	for k, f := range floors {
		m := median(times[k+1])
		b.ReportMetric(float64(m)/1e6, f.Name+"-ms")
		if m > 0 {
			b.ReportMetric(float64(subj)/float64(m), "x-"+f.Name)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
