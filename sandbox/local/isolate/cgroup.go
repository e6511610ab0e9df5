//go:build linux

package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func findCgroupBases() cgroupBases {
	b := cgroupBases{v1: map[string]string{}}
	own := map[string]string{} // controller (or "" for v2) -> path
	if f, err := os.Open("/proc/self/cgroup"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			if parts[0] == "0" && parts[1] == "" {
				own[""] = parts[2]
				continue
			}
			for _, c := range strings.Split(parts[1], ",") {
				own[c] = parts[2]
			}
		}
		f.Close()
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return b
	}
	defer f.Close()
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
		if sep < 0 || len(fields) < sep+4 || fields[3] != "/" {
			continue
		}
		mnt, fstype, opts := fields[4], fields[sep+1], fields[sep+3]
		switch fstype {
		case "cgroup2":
			if p, ok := own[""]; ok && b.v2 == "" {
				b.v2 = filepath.Join(mnt, p)
			}
		case "cgroup":
			for _, o := range strings.Split(opts, ",") {
				if o == "memory" || o == "pids" || o == "freezer" {
					if p, ok := own[o]; ok {
						if _, dup := b.v1[o]; !dup {
							b.v1[o] = filepath.Join(mnt, p)
						}
					}
				}
			}
		}
	}
	return b
}

// probeMechanisms finds, by creating and removing a probe cgroup, which
// controls this process can really enforce.
func probeMechanisms(b cgroupBases) cgroupMechanisms {
	var m cgroupMechanisms
	try := func(base string, files ...string) bool {
		if base == "" {
			return false
		}
		dir := filepath.Join(base, fmt.Sprintf("sandboxkit-probe-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return false
		}
		defer os.Remove(dir)
		for _, f := range files {
			if err := syscall.Access(filepath.Join(dir, f), 2 /* W_OK */); err != nil {
				return false
			}
		}
		return true
	}
	if try(b.v1["memory"], "memory.limit_in_bytes", "cgroup.procs") {
		m.memory = "v1"
	} else if try(b.v2, "memory.max", "cgroup.procs") {
		m.memory = "v2"
	}
	if try(b.v1["pids"], "pids.max", "cgroup.procs") {
		m.pids = "v1"
	} else if try(b.v2, "pids.max", "cgroup.procs") {
		m.pids = "v2"
	}
	v2Freeze := try(b.v2, "cgroup.freeze", "cgroup.kill", "cgroup.procs")
	if try(b.v1["freezer"], "freezer.state", "cgroup.procs") {
		m.freezer = "v1"
	} else if v2Freeze {
		m.freezer = "v2"
	}
	if v2Freeze {
		m.kill = "v2"
	}
	return m
}

// sandboxCgroups are one sandbox's cgroup directories.
type sandboxCgroups struct {
	mech    cgroupMechanisms
	memory  string // dir enforcing memory, "" none
	pids    string // dir enforcing pids (and listing the sandbox's tasks)
	freezer string
	v2      string // v2 dir when any v2 mechanism is used
	// commands is a child of the v1 pids cgroup holding the sandbox's
	// commands under Limits.Pids, while the agent keeps AgentTaskReserve
	// more in the parent (see CommandsCgroupFD); "" where there is none.
	commands string
	all      []string
}

// commandsCgroup names the child pids cgroup of the sandbox's commands.
const commandsCgroup = "commands"

func createCgroups(b cgroupBases, m cgroupMechanisms, id string, memBytes int64, pids int) (*sandboxCgroups, error) {
	cg := &sandboxCgroups{mech: m}
	// The host pid in the name lets a later Prepare remove the empty
	// cgroups of a host process that was killed (see removeStaleCgroups).
	name := fmt.Sprintf("sandboxkit-%d-%s", os.Getpid(), id)
	mk := func(base string) (string, error) {
		dir := filepath.Join(base, name)
		for _, d := range cg.all {
			if d == dir {
				return dir, nil
			}
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("isolate: create cgroup: %w", err)
		}
		cg.all = append(cg.all, dir)
		return dir, nil
	}
	write := func(dir, file, val string) error {
		if err := writeControl(filepath.Join(dir, file), val); err != nil {
			return fmt.Errorf("isolate: cgroup %s=%s: %w", file, val, err)
		}
		return nil
	}
	fail := func(err error) (*sandboxCgroups, error) {
		cg.remove()
		return nil, err
	}
	var err error
	if m.kill == "v2" || m.memory == "v2" || m.pids == "v2" || m.freezer == "v2" {
		if cg.v2, err = mk(b.v2); err != nil {
			return fail(err)
		}
	}
	// A pids cgroup is made even without a limit: it is the list of the
	// sandbox's tasks that KillAll and Freeze walk.
	switch m.pids {
	case "v1":
		cg.pids, err = mk(b.v1["pids"])
	case "v2":
		cg.pids = cg.v2
	}
	if err != nil {
		return fail(err)
	}
	if cg.pids != "" && pids > 0 {
		if err := write(cg.pids, "pids.max", strconv.Itoa(pids+AgentTaskReserve)); err != nil {
			return fail(err)
		}
		if m.pids == "v1" {
			// v1 moves single threads: each command's forked child moves
			// itself here before execve (linux/amd64, linuxrunner's clone
			// start), or the agent's spawning thread joins this child and
			// every command it forks is born there (the os/exec start).
			dir := filepath.Join(cg.pids, commandsCgroup)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fail(fmt.Errorf("isolate: create cgroup: %w", err))
			}
			cg.commands = dir
			if err := write(dir, "pids.max", strconv.Itoa(pids)); err != nil {
				return fail(err)
			}
		}
	}
	if memBytes > 0 {
		switch m.memory {
		case "v1":
			if cg.memory, err = mk(b.v1["memory"]); err != nil {
				return fail(err)
			}
			if err := write(cg.memory, "memory.limit_in_bytes", strconv.FormatInt(memBytes, 10)); err != nil {
				return fail(err)
			}
			// Without this, the limit is only on RAM and swap absorbs the rest.
			if _, err := os.Stat(filepath.Join(cg.memory, "memory.memsw.limit_in_bytes")); err == nil {
				if err := write(cg.memory, "memory.memsw.limit_in_bytes", strconv.FormatInt(memBytes, 10)); err != nil {
					return fail(err)
				}
			}
		case "v2":
			cg.memory = cg.v2
			if err := write(cg.memory, "memory.max", strconv.FormatInt(memBytes, 10)); err != nil {
				return fail(err)
			}
			if _, err := os.Stat(filepath.Join(cg.memory, "memory.swap.max")); err == nil {
				if err := write(cg.memory, "memory.swap.max", "0"); err != nil {
					return fail(err)
				}
			}
		}
	}
	switch m.freezer {
	case "v1":
		cg.freezer, err = mk(b.v1["freezer"])
	case "v2":
		cg.freezer = cg.v2
	}
	if err != nil {
		return fail(err)
	}
	return cg, nil
}

// writeControl writes val to a cgroup control file with raw system calls:
// os.WriteFile would register the (pollable) kernfs file with the
// runtime's poller first, four more system calls for one write, on every
// create.
func writeControl(path, val string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for {
		_, err = unix.Write(fd, []byte(val))
		if err != unix.EINTR {
			break
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// attach moves pid into every cgroup of the sandbox. The child is still
// blocked reading its configuration, so nothing it starts escapes.
func (cg *sandboxCgroups) attach(pid int) error {
	for _, d := range cg.all {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("isolate: move pid %d into cgroup %s: %w", pid, d, err)
		}
	}
	return nil
}

func (cg *sandboxCgroups) tasks() []int {
	dir := cg.pids
	if dir == "" {
		dir = cg.v2
	}
	if dir == "" && len(cg.all) > 0 {
		dir = cg.all[0]
	}
	if dir == "" {
		return nil
	}
	var pids []int
	for _, d := range []string{dir, cg.commands} {
		if d == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, l := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(l); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

func (cg *sandboxCgroups) setFrozen(frozen bool) error {
	switch cg.mech.freezer {
	case "v1":
		state := "THAWED"
		if frozen {
			state = "FROZEN"
		}
		file := filepath.Join(cg.freezer, "freezer.state")
		write := func(v string) error {
			if err := os.WriteFile(file, []byte(v), 0); err != nil {
				return fmt.Errorf("isolate: freezer.state=%s: %w", v, err)
			}
			return nil
		}
		if err := write(state); err != nil {
			return err
		}
		// v1 freezing is asynchronous, and a freeze can stall in FREEZING
		// (a task busy forking or in the kernel when it was asked): the
		// kernel only retries when FROZEN is written again, so write it
		// again while waiting, and now and then thaw and start over so a
		// task stuck half-frozen gets another chance (runc does the same).
		deadline := time.Now().Add(5 * time.Second)
		for i := 1; ; i++ {
			b, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("isolate: freezer.state: %w", err)
			}
			got := strings.TrimSpace(string(b))
			if got == state {
				return nil
			}
			if time.Now().After(deadline) {
				if frozen {
					_ = write("THAWED") // never leave a sandbox half frozen
				}
				return fmt.Errorf("isolate: freezer did not reach %s (still %s)", state, got)
			}
			time.Sleep(time.Millisecond)
			if frozen && i%10 == 0 {
				if i%200 == 0 {
					_ = write("THAWED")
					time.Sleep(time.Millisecond)
				}
				if err := write(state); err != nil {
					return err
				}
			}
		}
	case "v2":
		v := "0"
		if frozen {
			v = "1"
		}
		if err := os.WriteFile(filepath.Join(cg.freezer, "cgroup.freeze"), []byte(v), 0); err != nil {
			return fmt.Errorf("isolate: cgroup.freeze=%s: %w", v, err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for frozen {
			b, _ := os.ReadFile(filepath.Join(cg.freezer, "cgroup.events"))
			if strings.Contains(string(b), "frozen 1") {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New("isolate: cgroup2 freeze did not complete")
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	return errors.New("isolate: no freezer cgroup")
}

// killAll kills every task in the sandbox's cgroups until none is left.
func (cg *sandboxCgroups) killAll() error {
	if cg.mech.kill == "v2" {
		if err := os.WriteFile(filepath.Join(cg.v2, "cgroup.kill"), []byte("1"), 0); err != nil {
			return fmt.Errorf("isolate: cgroup.kill: %w", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := cg.tasks()
		if len(pids) == 0 {
			return nil
		}
		// Freezing first stops a fork bomb from outrunning the kill loop.
		frozen := cg.mech.freezer != "" && cg.setFrozen(true) == nil
		for _, p := range cg.tasks() {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if frozen {
			// SIGKILL is acted on only once a task runs again.
			cg.setFrozen(false)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("isolate: %d processes still in the sandbox's cgroup after SIGKILL", len(pids))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// remove deletes the cgroup directories; they must be empty, so it waits a
// little for killed tasks to be reaped.
func (cg *sandboxCgroups) remove() error {
	var errs []error
	dirs := cg.all
	if cg.commands != "" {
		dirs = append([]string{cg.commands}, dirs...)
	}
	for _, d := range dirs {
		var err error
		for i := 0; i < 200; i++ {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("isolate: remove cgroup: %w", err))
		}
	}
	cg.all, cg.commands = nil, ""
	return errors.Join(errs...)
}

// removeStaleCgroups removes the empty cgroups left behind by host
// processes that died without Cleanup (SIGKILL). Non-empty ones fail to
// rmdir and stay.
func removeStaleCgroups(b cgroupBases) {
	bases := []string{b.v2}
	for _, d := range b.v1 {
		bases = append(bases, d)
	}
	for _, base := range bases {
		if base == "" {
			continue
		}
		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), "sandboxkit-")
			if !ok || !e.IsDir() {
				continue
			}
			pidStr, _, _ := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidStr)
			if err != nil || pid == os.Getpid() {
				continue
			}
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				os.Remove(filepath.Join(base, e.Name(), commandsCgroup))
				os.Remove(filepath.Join(base, e.Name()))
			}
		}
	}
}
