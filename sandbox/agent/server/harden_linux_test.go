package server

import (
	"fmt"
	"strings"
	"testing"
)

// The confinement check runs in the scratch directory a backend names
// (ServeOptions.ScratchDir): the local landlock tier's agent has no
// writable /tmp, and the check was skipped there with "cannot check the
// kernel's confinement of opens (no writable /tmp)" on every sandbox.
func TestConfinementCheckRunsInTheScratchDir(t *testing.T) {
	var logged []string
	logf := func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	if err := checkConfinement(logf, t.TempDir()); err != nil {
		t.Fatalf("checkConfinement on this kernel: %v", err)
	}
	if len(logged) != 0 {
		t.Errorf("with a writable scratch directory the check logged %q; want it to run", logged)
	}
	if err := checkConfinement(logf, "/nonexistent-scratch"); err != nil {
		t.Fatal(err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "no writable /nonexistent-scratch") {
		t.Errorf("without one it logged %q; want the skip named", logged)
	}
}
