// Package proctest holds process helpers for sandboxkit's tests: what a
// test needs to do to a sandbox's processes from outside that the Go
// standard library does not offer.
package proctest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Stop stops process pid with SIGSTOP and waits until every one of its
// threads shows as stopped. Why wait: kill returns once the signal is
// queued; a thread then takes it and the others stop after, so for a
// moment the process still runs. A test of an agent that reads nothing
// that sent SIGSTOP and went on at once saw the agent answer in that
// moment (3 of 40 runs of a cancelled-call test failed so).
func Stop(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, task := range tasks {
			// The state follows the command's closing parenthesis.
			st, err := os.ReadFile(dir + task.Name() + "/stat")
			if i := strings.LastIndexByte(string(st), ')'); err == nil && i >= 0 && i+2 < len(st) && (st[i+2] == 'T' || st[i+2] == 't') {
				stopped++
			}
		}
		if stopped == len(tasks) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d threads of process %d stopped 10 s after SIGSTOP", stopped, len(tasks), pid)
		}
	}
}
