package sandboxtest

import (
	"os"
	"syscall"
	"testing"
)

// smallFileSystem mounts a tmpfs of size bytes on a new directory, open to
// every uid (a sandbox may run as another), and unmounts it at the end of
// the test. It needs root; without it the test is skipped.
func smallFileSystem(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system for the workspace needs root")
	}
	dir, err := os.MkdirTemp("", "sandboxkit-contract-small-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0777,size="+itoa(int(size))); err != nil {
		os.Remove(dir)
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		_ = os.Remove(dir)
	})
	return dir
}
