//go:build linux

package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// GC removes the temporary workspace of a process that is gone and keeps
// everything it cannot prove abandoned.
func TestGCRemovesOnlyWorkspacesOfDeadProcesses(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	// A pid that certainly belonged to a process which has ended.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.ProcessState.Pid()
	if processAlive(deadPID) {
		t.Skipf("pid %d was reused at once; cannot build the case", deadPID)
	}

	mk := func(name string) string {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "sub", "data.txt"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leftover := mk(fmt.Sprintf("%s%d-123", tempWorkspacePrefix, deadPID))
	ours, err := newTempWorkspace() // this process is alive
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ours, tmp) {
		t.Fatalf("newTempWorkspace made %s, outside TMPDIR %s", ours, tmp)
	}
	noPID := mk(tempWorkspacePrefix + "123456789") // older naming: no pid to check
	other := mk("not-ours-1-2")
	// A link named like a leftover must be removed as a link, never followed.
	target := mk("link-target")
	link := filepath.Join(tmp, fmt.Sprintf("%s%d-link", tempWorkspacePrefix, deadPID))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	// Too recent for --older-than: kept.
	removed, err := GC(time.Hour)
	if err != nil || len(removed) != 0 {
		t.Fatalf("GC(1h) removed %v, err %v; want nothing (everything is new)", removed, err)
	}

	removed, err = GC(0)
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if !slices.Equal(removed, []string{leftover}) {
		t.Fatalf("GC removed %v, want only %s", removed, leftover)
	}
	for _, keep := range []string{ours, noPID, other, filepath.Join(target, "sub", "data.txt"), link} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("GC removed %s: %v", keep, err)
		}
	}
	if _, err := os.Lstat(leftover); !os.IsNotExist(err) {
		t.Errorf("the dead process's workspace is still there: %v", err)
	}
}
