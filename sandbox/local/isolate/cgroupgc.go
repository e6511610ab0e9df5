//go:build linux

package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMounts lists the mount points of the hierarchies sandboxes make
// cgroups in: cgroup v1 memory, pids and freezer, and cgroup2.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 || seen[fields[4]] {
			continue
		}
		mnt, fstype, opts := fields[4], fields[sep+1], fields[sep+3]
		keep := fstype == "cgroup2"
		if fstype == "cgroup" {
			for _, o := range strings.Split(opts, ",") {
				keep = keep || o == "memory" || o == "pids" || o == "freezer"
			}
		}
		if keep {
			seen[mnt] = true
			out = append(out, mnt)
		}
	}
	return out
}

// staleCgroupOwner returns the host pid in the name of a cgroup this
// package makes ("sandboxkit-PID-ID", and "sandboxkit-probe-PID" of
// Probe), and whether the name is one.
func staleCgroupOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "sandboxkit-")
	if !ok {
		return 0, false
	}
	if p, ok := strings.CutPrefix(rest, "probe-"); ok {
		rest = p + "-"
	}
	digits, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	if !ok || err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// GCCgroups removes the cgroups of sandboxes whose host process is gone
// (killed with SIGKILL before Cleanup; a later Prepare removes only empty
// ones below its own cgroup): anywhere in the memory, pids and freezer
// hierarchies and cgroup2, it kills what is still in them and removes
// them. It returns the directories removed. A cgroup whose host pid is in
// use again is kept: a reused pid errs on the side of leaving it.
func GCCgroups() ([]string, error) {
	var stale []string
	for _, mnt := range cgroupMounts() {
		base := strings.Count(mnt, "/")
		filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(p, "/")-base > 12 {
				return fs.SkipDir
			}
			pid, ok := staleCgroupOwner(d.Name())
			if !ok {
				return nil
			}
			if pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
				stale = append(stale, p)
			}
			return fs.SkipDir
		})
	}
	var removed []string
	var errs []error
	for _, dir := range stale {
		if err := removeCgroupTree(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// removeCgroupTree kills every task in dir and its children (the commands
// cgroup) and removes them, children first.
func removeCgroupTree(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	deadline := time.Now().Add(5 * time.Second)
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("isolate: remove stale cgroup %s: %w", d, err)
			}
			// Busy: a task is left (the kernel kills a dead host's
			// sandbox soon after; this makes sure of it).
			// A host killed while its sandbox was paused left it frozen,
			// where SIGKILL waits.
			os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0)
			os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0)
			if b, rerr := os.ReadFile(filepath.Join(d, "cgroup.procs")); rerr == nil {
				for _, l := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(l); err == nil {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}
