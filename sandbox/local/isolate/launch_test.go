//go:build linux

package isolate

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// The launcher's child shares the host's memory until it execs, and with
// it the "dumpable" flag that its uid change clears: a host that made
// itself undumpable (so that its memory cannot be read through /proc or
// ptrace by its uid) must stay so, and a dumpable one must stay dumpable.
func TestLaunchLeavesTheHostDumpableFlagAlone(t *testing.T) {
	for _, tier := range []driver.Tier{driver.TierNamespace, driver.TierLandlock} {
		t.Run(tier.String(), func(t *testing.T) {
			requireTier(t, tier)
			orig, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(orig), 0, 0, 0)
			for _, want := range []int{0, 1} {
				if err := unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(want), 0, 0, 0); err != nil {
					t.Fatal(err)
				}
				out, code := run(t, newSpec(t, tier), "echo started")
				if code != 0 || strings.TrimSpace(out) != "started" {
					t.Fatalf("sandbox with the host's dumpable=%d: exit %d, %q", want, code, out)
				}
				got, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("the host's dumpable flag is %d after a launch, was %d", got, want)
				}
			}
		})
	}
}

// A step that fails in the launcher's child is reported by name and errno,
// and leaves no process behind.
func TestLaunchReportsTheFailingStep(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	spec := newSpec(t, driver.TierNamespace)
	h, err := Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	// A workspace removed between Prepare and Launch: open_tree fails in
	// the child, after the namespaces exist.
	h.spec.HostWorkspace = spec.HostWorkspace + "-gone"
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	_, err = h.Launch(LaunchRequest{Config: []byte("{}"), Stream: w})
	if err == nil || !strings.Contains(err.Error(), "open_tree "+spec.HostWorkspace+"-gone") || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Launch with a missing workspace: %v, want the open_tree step and ENOENT", err)
	}
}
