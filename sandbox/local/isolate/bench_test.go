package isolate

import (
	"os"
	"os/exec"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// BenchmarkCreate measures creating a sandbox whose stage 2 exits at once
// (Prepare, start, Started, Enter with every layer, exec of stage agent,
// Cleanup) against bubblewrap with comparable flags and against the floor,
// a plain exec of /bin/true.
func BenchmarkCreate(b *testing.B) {
	b.Run("exec-true", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("isolate-namespace", func(b *testing.B) {
		requireTier(b, driver.TierNamespace)
		spec := newSpec(b, driver.TierNamespace)
		spec.Limits = driver.Limits{Pids: 64, MemoryBytes: 512 << 20, TmpBytes: 64 << 20}
		for b.Loop() {
			bx := start(b, spec, "go:exit")
			if _, code := bx.wait(b); code != 0 {
				b.Fatalf("exit %d: %s", code, bx.stderr.String())
			}
			bx.close(b)
		}
	})
	b.Run("isolate-landlock", func(b *testing.B) {
		requireTier(b, driver.TierLandlock)
		spec := newSpec(b, driver.TierLandlock)
		for b.Loop() {
			bx := start(b, spec, "go:exit")
			if _, code := bx.wait(b); code != 0 {
				b.Fatalf("exit %d: %s", code, bx.stderr.String())
			}
			bx.close(b)
		}
	})
	b.Run("bwrap", func(b *testing.B) {
		bwrap, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("bubblewrap not installed (apt-get install bubblewrap)")
		}
		ws := b.TempDir()
		args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
			"--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc", "--symlink", "usr/bin", "/bin",
			"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
			"--bind", ws, "/workspace", "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev",
			"--hostname", "sandbox", "--chdir", "/workspace", "/bin/true"}
		if os.Geteuid() == 0 {
			args = append([]string{"--unshare-user", "--uid", "0", "--gid", "0"}, args...)
		}
		for b.Loop() {
			if out, err := exec.Command(bwrap, args...).CombinedOutput(); err != nil {
				b.Fatalf("bwrap: %v: %s", err, out)
			}
		}
	})
}
