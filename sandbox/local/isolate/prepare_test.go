//go:build linux

package isolate

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

func TestPrepareRefusesWhatItCannotEnforce(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	cases := []struct {
		name   string
		mutate func(s *Spec)
		want   string
	}{
		{"process tier is not built here", func(s *Spec) { s.Tier = driver.TierProcess }, "not built by this package"},
		{"empty id", func(s *Spec) { s.ID = "" }, "Spec.ID is empty"},
		{"id with a slash", func(s *Spec) { s.ID = "../x" }, "letters, digits"},
		{"relative workspace", func(s *Spec) { s.HostWorkspace = "ws" }, "absolute path"},
		{"missing workspace", func(s *Spec) { s.HostWorkspace = "/nonexistent/ws" }, "no such file"},
		{"read-only /proc", func(s *Spec) { s.ReadOnlyPaths = []string{"/proc"} }, "provided by the sandbox"},
		{"negative limit", func(s *Spec) { s.Limits.Pids = -1 }, "must not be negative"},
		{"disk quota in the landlock tier", func(s *Spec) { s.Tier = driver.TierLandlock; s.Limits.DiskBytes = 1 << 20 }, "needs the namespace tier"},
		{"tmpfs larger than memory", func(s *Spec) { s.Limits.MemoryBytes = 64 << 20; s.Limits.DiskBytes = 64 << 20 }, "below Limits.MemoryBytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSpec(t, driver.TierNamespace)
			c.mutate(&s)
			h, err := Prepare(s)
			if err == nil {
				h.Cleanup()
				t.Fatal("Prepare accepted the spec")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestPrepareAsRootRefusesAnUnreachableWorkspace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root maps the sandbox to another uid")
	}
	requireTier(t, driver.TierNamespace)
	s := newSpec(t, driver.TierNamespace)
	s.HostWorkspace = t.TempDir() // its parent is 0700 root
	_, err := Prepare(s)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the workspace") {
		t.Fatalf("want a clear refusal, got %v", err)
	}
}

func TestCleanupGivesTheWorkspaceBack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root changes the workspace's owner")
	}
	requireTier(t, driver.TierNamespace)
	s := newSpec(t, driver.TierNamespace)
	os.Chown(s.HostWorkspace, 4321, 4321)
	b := start(t, s, "mkdir /workspace/d && echo x > /workspace/d/f && ln -s /etc /workspace/l")
	b.wait(t)
	b.close(t)
	for _, p := range []string{"", "d", "d/f", "l"} {
		fi, err := os.Lstat(filepath.Join(s.HostWorkspace, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4321 || st.Gid != 4321 {
			t.Errorf("%q is owned by %d:%d after Cleanup, want the workspace owner 4321", p, st.Uid, st.Gid)
		}
	}
	if fi, _ := os.Stat("/etc"); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("Cleanup followed a symlink out of the workspace")
	}
}

func TestReportNamesEachMechanism(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	s := newSpec(t, driver.TierNamespace)
	s.Limits = driver.Limits{MemoryBytes: 512 << 20, Pids: 64, CPUSeconds: 10, FileSizeBytes: 1 << 20, DiskBytes: 64 << 20}
	h, err := Prepare(s)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	rep := h.Report()
	if rep.Tier != driver.TierNamespace || rep.WorkspacePath != "/workspace" {
		t.Errorf("tier %v workspace %q", rep.Tier, rep.WorkspacePath)
	}
	mech := map[string]driver.Control{}
	for _, c := range rep.Controls {
		mech[c.Name] = c
	}
	caps := Probe()
	want := map[string]string{
		"network": "net namespace (only lo)", "disk": "tmpfs size=67108864 at /workspace",
		"cpu": "RLIMIT_CPU", "file_size": "RLIMIT_FSIZE=1048576", "syscalls": "seccomp deny-list",
		"processes_visible": "pid namespace", "unix_sockets": "mount namespace",
	}
	if caps.MemoryCgroup.Available {
		want["memory"] = "cgroup v"
	} else {
		want["memory"] = "RLIMIT_AS (fallback"
	}
	if caps.PidsCgroup.Available {
		want["pids"] = "pids.max=64"
	} else {
		want["pids"] = "RLIMIT_NPROC"
	}
	for name, w := range want {
		c, ok := mech[name]
		if !ok || !c.Enforced || !strings.Contains(c.Mechanism, w) {
			t.Errorf("control %s = %+v, want enforced by %q", name, c, w)
		}
	}
}

func TestProbeDescribesEveryCapability(t *testing.T) {
	c := Probe()
	for _, line := range c.List() {
		if line.Name == "" || line.Description == "" {
			t.Errorf("capability without a name or description: %+v", line)
		}
	}
	if c.Root != (os.Geteuid() == 0) {
		t.Errorf("Root = %v", c.Root)
	}
	if c.Best == driver.TierNamespace && !c.UserNamespaces.Available {
		t.Error("namespace tier picked without user namespaces")
	}
}

func BenchmarkProbe(b *testing.B) {
	for b.Loop() {
		probe()
	}
}

func TestWrapCommandAppliesPerCommandLimits(t *testing.T) {
	argv := []string{"/usr/bin/python3", "-c", "print(1)"}
	cases := []struct {
		name string
		spec Spec
		want string // "" means argv unchanged
	}{
		{"no per-command limits", Spec{}, ""},
		{"memory enforced by a cgroup", Spec{Limits: driver.Limits{MemoryBytes: 1 << 30}, Plan: &Plan{MemoryCgroup: true}}, ""},
		{"cpu limit", Spec{Limits: driver.Limits{CPUSeconds: 5}, Plan: &Plan{}}, "ulimit -t 5 || exit 126; exec \"$0\" \"$@\""},
		{"memory fallback", Spec{Limits: driver.Limits{MemoryBytes: 1 << 30}, Plan: &Plan{}}, "ulimit -v 1048576 || exit 126; exec \"$0\" \"$@\""},
		{"process tier has no plan", Spec{Limits: driver.Limits{MemoryBytes: 1 << 20, CPUSeconds: 1}}, "ulimit -t 1 || exit 126; ulimit -v 1024 || exit 126; exec \"$0\" \"$@\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := WrapCommand(c.spec, argv)
			if c.want == "" {
				if strings.Join(got, " ") != strings.Join(argv, " ") {
					t.Errorf("argv changed to %q", got)
				}
				return
			}
			if len(got) != 3+len(argv) || got[0] != "/bin/sh" || got[2] != c.want || strings.Join(got[3:], " ") != strings.Join(argv, " ") {
				t.Errorf("got %q, want sh -c %q + argv", got, c.want)
			}
		})
	}
	t.Run("the wrapped command runs with the limits", func(t *testing.T) {
		w := WrapCommand(Spec{Limits: driver.Limits{CPUSeconds: 3, MemoryBytes: 1 << 30}}, []string{"/bin/cat", "/proc/self/limits"})
		out, err := exec.Command(w[0], w[1:]...).Output()
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`Max cpu time\s+3\s+3`).Match(out) || !regexp.MustCompile(`Max address space\s+1073741824\s+1073741824`).Match(out) {
			t.Errorf("limits not applied:\n%s", out)
		}
	})
}
