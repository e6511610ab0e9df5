package server

import (
	"runtime"
	"sync"
)

// The agent spends its life waiting: for a request, a process, a pipe. A
// request served inline still hands work between goroutines (the read loop,
// the writer, the reaper), and with more than one P every hand-off wakes
// another OS thread, which spins looking for work to steal and goes back to
// sleep: measured on a 2-core machine, ~3 futex calls and ~4 nanosleeps per
// 1 KB read, and 15–20% of its round trip. With one P a hand-off is a switch
// on the same thread. Blocking system calls (process starts, file and pipe
// I/O) release the P, so requests still overlap; only CPU-bound work in the
// agent itself — searching files — needs more, and gets it (widenProcs).
var procs struct {
	mu       sync.Mutex
	narrowed bool // NarrowProcs was called
	widers   int  // searches running
	cpus     int  // the runtime's default GOMAXPROCS, while widers > 0
}

// NarrowProcs runs the agent's Go scheduler on one P (GOMAXPROCS 1) except
// while a search runs, when the runtime's default is restored so the
// search uses every CPU. A backend calls it once, before Serve, in a
// process that does nothing but serve the agent.
func NarrowProcs() {
	procs.mu.Lock()
	defer procs.mu.Unlock()
	procs.narrowed = true
	if procs.widers == 0 {
		runtime.GOMAXPROCS(1)
	}
}

// widenProcs gives a search the CPUs until the returned function is
// called: GOMAXPROCS becomes the runtime's default plus one, and workers
// is the default, the number of files to read and match at once (0 when
// the process was never narrowed: the engine then picks).
//
// The default is the runtime's own (runtime.SetDefaultGOMAXPROCS: the CPUs
// the agent's affinity allows, capped by its cgroup's CPU quota), not the
// value NarrowProcs found: a local agent is started with GOMAXPROCS=1 in
// its environment (sandbox/local/isolate spares it the other Ps' start-up),
// so that value is 1, and a search widened to it ran on one core — 171 ms
// of wall time and 175 ms of CPU over the Go source tree against
// ripgrep's 89 ms on two, on a 2-core machine.
//
// The one P beyond the workers is for everything else: the walk that
// feeds them, and the agent's other requests. The workers hold their Ps
// through their system calls (search_linux.go), so with only as many Ps as
// workers a request arriving during a search waited for a worker to yield.
func widenProcs() (workers int, restore func()) {
	procs.mu.Lock()
	defer procs.mu.Unlock()
	if !procs.narrowed {
		return 0, func() {}
	}
	if procs.widers == 0 {
		runtime.SetDefaultGOMAXPROCS()
		procs.cpus = runtime.GOMAXPROCS(0)
		runtime.GOMAXPROCS(procs.cpus + 1)
	}
	procs.widers++
	return procs.cpus, func() {
		procs.mu.Lock()
		defer procs.mu.Unlock()
		if procs.widers--; procs.widers == 0 {
			runtime.GOMAXPROCS(1)
		}
	}
}
