//go:build linux

package isolate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/vfork"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

func llSpec(t *testing.T) Spec { return newSpec(t, driver.TierLandlock) }

// The landlock tier shares the host's mount, pid and net namespaces; these
// are the controls it claims.
func TestLandlockTierControls(t *testing.T) {
	requireTier(t, driver.TierLandlock)
	outside, err := os.MkdirTemp("", "isolate-outside-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(outside, 0o777)
	t.Cleanup(func() { os.RemoveAll(outside) })
	runCases(t, llSpec, []probeCase{
		{name: "privileges are gone",
			probe: "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status",
			want:  []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"}},
		{name: "system directories and other host directories are read-only",
			probe: fmt.Sprintf("for f in /etc/x /usr/x /x %s/x; do touch $f && echo WROTE $f; done; echo done", outside),
			want:  []string{"done"}, deny: []string{"WROTE"}},
		{name: "workspace and TMPDIR are writable",
			probe: `echo a > "$HOME/f" && echo b > "$TMPDIR/f" && echo OK`, want: []string{"OK"}},
		{name: "shadow is unreadable",
			probe: "cat /etc/shadow && echo READ", deny: []string{"READ"}},
		{name: "host home is not readable",
			probe: "ls /root && echo LISTED; cat /root/.bashrc && echo READ", deny: []string{"LISTED", "READ"}},
		{name: "host pid cannot be signalled",
			probe: fmt.Sprintf("kill -0 %d && echo SIGNALLED", os.Getpid()), deny: []string{"SIGNALLED"}},
		{name: "raw syscalls fail", probe: "unshare -Ur id && echo UNSHARED; mount -t tmpfs x $TMPDIR && echo MOUNTED",
			deny: []string{"UNSHARED", "MOUNTED"}},
	})
	t.Run("network is refused", func(t *testing.T) {
		tcp, udp, sock, reached := listeners(t)
		out, _ := run(t, llSpec(t), "exec 2>&1\n"+netProbe(tcp, udp, sock))
		// py-unix: a host unix socket (issue 25; see landlockTierSockets).
		for _, name := range []string{"py-tcp", "py-mptcp", "py-udp", "py-unix", "curl", "devtcp"} {
			if !strings.Contains(out, name+":fail") {
				t.Errorf("%s was not refused:\n%s", name, out)
			}
		}
		if got := reached(); len(got) > 0 {
			t.Errorf("host listeners were reached: %v\n%s", got, out)
		}
	})
}

func TestLandlockTierReportsItsGaps(t *testing.T) {
	requireTier(t, driver.TierLandlock)
	h, err := Prepare(llSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	rep := h.Report()
	gaps := strings.Join(rep.Gaps, "\n")
	for _, want := range []string{"host processes are visible"} {
		if !strings.Contains(gaps, want) {
			t.Errorf("gaps lack %q:\n%s", want, gaps)
		}
	}
	if strings.Contains(gaps, "unix socket") {
		t.Errorf("Landlock ABI %d: the host's unix sockets are kept out, but the gaps say otherwise:\n%s", Probe().LandlockABI, gaps)
	}
	for _, c := range rep.Controls {
		if c.Name != "unix_sockets" {
			continue
		}
		want := "seccomp: socket(AF_UNIX) refused"
		if Probe().LandlockABI >= 9 {
			want = "LANDLOCK_ACCESS_FS_RESOLVE_UNIX"
		}
		if !c.Enforced || !strings.Contains(c.Mechanism, want) {
			t.Errorf("unix_sockets control %+v, want enforced by %q", c, want)
		}
		if Probe().LandlockABI < 9 && !strings.Contains(c.Mechanism, "Cost:") {
			t.Errorf("the unix_sockets control does not name its cost: %q", c.Mechanism)
		}
		return
	}
	t.Errorf("no unix_sockets control in %+v", rep.Controls)
	if rep.WorkspacePath != h.Spec().HostWorkspace {
		t.Errorf("WorkspacePath %q, want the host path", rep.WorkspacePath)
	}
	if tmp := h.TmpDir(); !strings.HasPrefix(tmp, os.TempDir()) || filepath.Base(tmp) == "tmp" {
		t.Errorf("TmpDir %q is not a private directory", tmp)
	}
}

// TestStagedLaunch builds both tiers the way arm64 does (no vfork
// assembly there: stage init runs the setup program after a fork and an
// exec) and checks the boundary's main controls. This machine cannot run
// arm64 isolation (user-mode emulation refuses seccomp), so this is as
// close as it gets.
func TestStagedLaunch(t *testing.T) {
	vforkLaunch = false
	t.Cleanup(func() { vforkLaunch = vfork.Available })
	for _, tier := range []driver.Tier{driver.TierNamespace, driver.TierLandlock} {
		t.Run(tier.String(), func(t *testing.T) {
			requireTier(t, tier)
			spec := func(t *testing.T) Spec { return newSpec(t, tier) }
			runCases(t, spec, []probeCase{
				{name: "privileges are gone",
					probe: "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status",
					want:  []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"}},
				{name: "system directories are read-only",
					probe: "for f in /etc/x /usr/x; do touch $f && echo WROTE $f; done; echo done",
					want:  []string{"done"}, deny: []string{"WROTE"}},
			})
			t.Run("network and host unix sockets are refused", func(t *testing.T) {
				tcp, udp, sock, reached := listeners(t)
				out, _ := run(t, spec(t), "exec 2>&1\n"+netProbe(tcp, udp, sock))
				for _, name := range []string{"py-tcp", "py-unix", "devtcp"} {
					if !strings.Contains(out, name+":fail") {
						t.Errorf("%s was not refused:\n%s", name, out)
					}
				}
				if got := reached(); len(got) > 0 {
					t.Errorf("host listeners were reached: %v\n%s", got, out)
				}
			})
		})
	}
}
