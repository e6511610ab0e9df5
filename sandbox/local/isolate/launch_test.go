//go:build linux

package isolate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// Every process of a launched sandbox is in every one of its cgroups, both
// when the launcher's child is born in the cgroup v2 directory (clone3
// with CLONE_INTO_CGROUP) and joins v1 through "tasks", and on the
// fallback for kernels without CLONE_INTO_CGROUP, where it writes itself
// into cgroup.procs. A child left out of one would escape that
// hierarchy's limit, freezer or kill.
func TestLaunchJoinsEveryCgroup(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	defer cloneIntoCgroup.Store(cloneIntoCgroup.Load())
	for _, into := range []bool{true, false} {
		for _, tier := range []driver.Tier{driver.TierNamespace, driver.TierLandlock} {
			t.Run(fmt.Sprintf("%s/clone-into-cgroup=%v", tier, into), func(t *testing.T) {
				requireTier(t, tier)
				cloneIntoCgroup.Store(into)
				spec := newSpec(t, tier)
				spec.Limits = driver.Limits{Pids: 64, MemoryBytes: 512 << 20}
				b := start(t, spec, "echo ready; sleep 60")
				if l := b.line(t); l != "ready" {
					t.Fatalf("probe said %q", l)
				}
				if b.h.cg == nil || len(b.h.cg.all) == 0 {
					t.Skip("no cgroup hierarchy this user may write (as an unprivileged user): the sandbox has no cgroups to join, and its controls say so")
				}
				members := func(dir string) []int {
					var pids []int
					for _, d := range []string{dir, filepath.Join(dir, commandsCgroup)} {
						raw, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
						if err != nil {
							continue
						}
						for _, f := range strings.Fields(string(raw)) {
							n, _ := strconv.Atoi(f)
							pids = append(pids, n)
						}
					}
					slices.Sort(pids)
					return slices.Compact(pids)
				}
				first := members(b.h.cg.all[0])
				if !slices.Contains(first, b.proc.Pid) || len(first) < 2 {
					t.Fatalf("cgroup %s holds %v, want the agent %d and its command", b.h.cg.all[0], first, b.proc.Pid)
				}
				for _, dir := range b.h.cg.all[1:] {
					if got := members(dir); !slices.Equal(got, first) {
						t.Errorf("cgroup %s holds %v, %s holds %v: every process belongs in each", dir, got, b.h.cg.all[0], first)
					}
				}
				if into && b.h.cg.v2 != "" && !cloneIntoCgroup.Load() {
					t.Logf("this kernel refused clone3 with CLONE_INTO_CGROUP: the launch fell back to a write")
				}
			})
		}
	}
}
