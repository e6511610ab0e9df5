//go:build linux

package isolate

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// BenchmarkWorkspaceOwnership measures giving a workspace of 100 files to
// a sandbox uid and back as a root host does: the shared-workspace record
// (acquire: record, manifest, chown; release: restore from the manifest)
// against the floor, a plain chown of the tree there and back, which is
// what the code before the record did.
func BenchmarkWorkspaceOwnership(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("only a root host gives the workspace away")
	}
	ws := b.TempDir()
	for i := range 100 {
		os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
	}
	chownAll := func(uid int) {
		filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error { return os.Lchown(p, uid, uid) })
	}
	b.Run("chown-tree-floor", func(b *testing.B) {
		for b.Loop() {
			chownAll(uidRangeStart)
			chownAll(0)
		}
	})
	b.Run("record", func(b *testing.B) {
		for b.Loop() {
			l, err := acquireWorkspace(ws, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.release(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
