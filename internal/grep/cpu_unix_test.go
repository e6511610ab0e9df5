//go:build unix

package grep

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used: under
// a loaded machine it compares work where wall time compares scheduling.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
