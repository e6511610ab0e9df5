//go:build linux

package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/local/isolate"
)

// tempWorkspacePrefix names the temporary workspaces this backend makes in
// os.TempDir(). The creating process's pid follows it, so that GC can tell a
// leftover from a workspace in use: Close removes a temporary workspace, but
// a host process killed with SIGKILL never reaches Close (its sandbox's
// processes die with it; the directory stays).
const tempWorkspacePrefix = "sandboxkit-ws-"

// newTempWorkspace makes a fresh temporary workspace named after this process.
func newTempWorkspace() (string, error) {
	return os.MkdirTemp("", fmt.Sprintf("%s%d-", tempWorkspacePrefix, os.Getpid()))
}

// GC removes the temporary workspaces in os.TempDir() whose creating process
// no longer runs, and that were last changed at least olderThan ago. It
// returns the directories removed. A workspace whose creator is alive, or
// whose name carries no pid (made by an older version), is left alone: a
// reused pid errs on the side of keeping data.
func GC(olderThan time.Duration) ([]string, error) {
	dir := os.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	cutoff := time.Now().Add(-olderThan)
	var removed []string
	var errs []error
	for _, e := range entries {
		pid, ok := workspacePID(e.Name())
		if !ok || processAlive(pid) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		// Lstat, not Stat: a symbolic link with this name is not ours to
		// follow (RemoveAll would only remove the link, but say so plainly).
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() || fi.ModTime().After(cutoff) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}

// GCHost gives back what sandboxes of killed host processes left on this
// machine besides temporary workspaces (see GC): the ownership of
// workspaces a root host gave to sandbox uids (every file to its owner
// from before the first sandbox; isolate.GCWorkspaces) and their cgroups
// (isolate.GCCgroups). It returns one line per thing done, for
// `sandboxkit gc` to print. Sandboxes of running hosts are left alone.
func GCHost() ([]string, error) {
	var lines []string
	// Cgroups first: emptying them kills whatever of a dead host's
	// sandbox still runs, so nothing writes into a workspace given back.
	cgs, cgErr := isolate.GCCgroups()
	for _, p := range cgs {
		lines = append(lines, "removed cgroup "+p)
	}
	ws, wsErr := isolate.GCWorkspaces()
	for _, p := range ws {
		lines = append(lines, "gave back the workspace "+p+" (every file to its owner)")
	}
	return lines, errors.Join(cgErr, wsErr)
}

// workspacePID returns the creator's pid from a temporary workspace's name.
func workspacePID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, tempWorkspacePrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// processAlive reports whether a process with this pid exists (EPERM means
// it exists but belongs to another user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
