//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Host uids for sandboxes when the host runs as root: one per workspace
// (shared by the sandboxes on it, see wsowner.go), drawn from a range no
// distribution hands out, so that the sandboxes' files and processes are
// their own and RLIMIT_NPROC counts only their processes.
const (
	uidRangeStart = 0x60000000
	uidRangeSize  = 1 << 24
)

var staleOnce sync.Once

// Handle is one prepared sandbox on the host side. Its methods are safe
// for concurrent use.
type Handle struct {
	spec Spec
	caps Capabilities
	cg   *sandboxCgroups

	mu      sync.Mutex
	pid     int
	pidfd   int
	frozen  bool
	cleaned bool
	// lease is the sandbox's share of the workspace's sandbox uid (root
	// host only).
	lease    *wsLease
	stopped  []int // pids SIGSTOPped by the signal freezer
	hostTemp string
}

// Prepare checks spec against this machine and decides how to build it:
// the host uid, the cgroups (created here, so a machine that cannot
// enforce a limit fails now), the Landlock ABI. It refuses, with an error
// naming what is missing, anything it cannot enforce. The caller must call
// Cleanup when done, also after a failed start.
func Prepare(spec Spec) (*Handle, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	caps := Probe()
	if err := caps.Can(spec.Tier); err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	ws, err := filepath.EvalSymlinks(spec.HostWorkspace)
	if err != nil {
		return nil, fmt.Errorf("isolate: workspace: %w", err)
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("isolate: workspace %s is not a directory", ws)
	}
	spec.HostWorkspace = ws
	plan := &Plan{HostUID: os.Getuid(), HostGID: os.Getgid()}
	if spec.Tier == driver.TierNamespace || spec.Tier == driver.TierLandlock {
		plan.LandlockABI = caps.LandlockABI
	}
	h := &Handle{spec: spec, caps: caps, pidfd: -1}
	h.spec.Plan = plan
	if caps.Root {
		// A sandbox uid owns nothing outside the workspace: it needs
		// every parent directory searchable by others.
		if err := reachable(ws, -1); err != nil {
			return nil, err
		}
		if spec.DisposableWorkspace {
			// Nobody shares it and nobody gets it back: a fresh uid.
			uid, err := freshUID()
			if err != nil {
				return nil, err
			}
			plan.HostUID, plan.HostGID = uid, uid
			if err := chownTree(ws, uid, uid); err != nil {
				return nil, fmt.Errorf("isolate: give the workspace to the sandbox uid: %w", err)
			}
		} else {
			// The workspace's sandbox uid, shared by every sandbox on
			// it (wsowner.go); the tree is given to it here.
			lease, err := acquireWorkspace(ws, spec.ID)
			if err != nil {
				return nil, fmt.Errorf("isolate: give the workspace to the sandbox uid: %w", err)
			}
			h.lease = lease
			plan.HostUID, plan.HostGID = lease.uid, lease.gid
		}
		plan.DropIdentity = spec.Tier == driver.TierLandlock
	}
	plan.NprocShared = spec.Tier == driver.TierLandlock && !caps.Root
	h.spec.Plan = plan
	if spec.Tier == driver.TierLandlock {
		dir, err := os.MkdirTemp("", "sandboxkit-tmp-"+spec.ID+"-")
		if err != nil {
			h.Cleanup()
			return nil, fmt.Errorf("isolate: private TMPDIR: %w", err)
		}
		h.hostTemp = dir
		plan.TmpDir = dir
		if caps.Root {
			if err := os.Chown(dir, plan.HostUID, plan.HostGID); err != nil {
				h.Cleanup()
				return nil, fmt.Errorf("isolate: private TMPDIR: %w", err)
			}
		}
	}
	l := spec.Limits
	if l.MemoryBytes > 0 && caps.mech.memory != "" {
		plan.MemoryCgroup = true
	}
	if l.Pids > 0 && caps.mech.pids != "" {
		plan.PidsCgroup = true
	}
	if caps.mech != (cgroupMechanisms{}) {
		staleOnce.Do(func() { removeStaleCgroups(caps.bases) })
		h.cg, err = createCgroups(caps.bases, caps.mech, spec.ID, l.MemoryBytes, l.Pids)
		if err != nil {
			h.Cleanup()
			return nil, err
		}
		plan.CommandsCgroup = h.cg.commands != ""
	}
	return h, nil
}

// reachable checks that uid can walk down to dir: the sandbox opens the
// workspace as that uid, and a 0700 parent owned by someone else (as
// t.TempDir or $HOME) would make the start fail deep inside the child.
func reachable(dir string, uid int) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("isolate: workspace: %w", err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm()&0o001 == 0 && int(sys.Uid) != uid {
			return fmt.Errorf("isolate: the sandbox's uid cannot reach the workspace %s: %s is mode %o; use a workspace whose parent directories are searchable by others (e.g. under /tmp or /var/tmp)", dir, p, st.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}

// chownTree gives every file below dir to uid:gid without following
// symlinks (a disposable workspace: see Spec.DisposableWorkspace).
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// Spec returns the Spec with Prepare's plan filled in. The launcher embeds
// this one in the configuration it sends to stage init.
func (h *Handle) Spec() Spec { return h.spec }

// TmpDir is the sandbox's temporary directory as processes inside see it:
// "/tmp" in the namespace tier, a private host directory in the landlock
// tier. The agent sets TMPDIR to it.
func (h *Handle) TmpDir() string {
	if h.spec.Tier == driver.TierLandlock {
		return h.spec.Plan.TmpDir
	}
	return "/tmp"
}

// WorkspacePath is the workspace as processes inside see it.
func (h *Handle) WorkspacePath() string {
	if h.spec.Tier == driver.TierNamespace {
		return WorkspaceInside
	}
	return h.spec.HostWorkspace
}

// SysProcAttr returns the attributes for starting stage init. Each call
// returns a fresh value. Pdeathsig kills the child when the thread that
// started it exits: start it from a locked, long-lived OS thread.
func (h *Handle) SysProcAttr() *syscall.SysProcAttr {
	p := h.spec.Plan
	a := &syscall.SysProcAttr{
		// Its own session: the host terminal's job-control signals do not
		// reach the sandbox.
		Setsid:    true,
		Pdeathsig: syscall.SIGKILL,
	}
	if h.spec.Tier == driver.TierNamespace {
		a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
		if !h.spec.Network {
			a.Cloneflags |= syscall.CLONE_NEWNET
		}
		// The cgroup namespace is entered by Enter, after Started has
		// moved the child into its cgroups, so that its root is the
		// sandbox's own cgroup.
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: p.HostUID, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: p.HostGID, Size: 1}}
		a.GidMappingsEnableSetgroups = false
		a.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	}
	return a
}

// Started is called by Launch right after the child was started and before
// it may run: it moves the child into the sandbox's cgroups and keeps a
// pidfd for killing it without pid-reuse races.
func (h *Handle) Started(pid int) error {
	if err := h.adopt(pid); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cg != nil {
		if err := h.cg.attach(pid); err != nil {
			return err
		}
	}
	return nil
}

// adopt records pid as the sandbox's first process (already in its
// cgroups) and keeps a pidfd for killing it without pid-reuse races.
func (h *Handle) adopt(pid int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pid != 0 {
		return errors.New("isolate: the sandbox was started twice")
	}
	h.pid = pid
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		h.pidfd = fd
	}
	return nil
}

// Freeze stops every process of the sandbox: with the freezer cgroup where
// there is one, else by SIGSTOP to each process (a process that handles
// SIGCONT sees the pause then). Calls into a frozen sandbox block until
// Thaw.
func (h *Handle) Freeze() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pid == 0 {
		return errors.New("isolate: Freeze before Started")
	}
	if h.frozen {
		return nil
	}
	if h.cg != nil && h.cg.mech.freezer != "" {
		if err := h.cg.setFrozen(true); err != nil {
			return err
		}
	} else {
		h.stopped = h.signalAll(syscall.SIGSTOP)
	}
	h.frozen = true
	return nil
}

// Thaw resumes a frozen sandbox.
func (h *Handle) Thaw() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.frozen {
		return nil
	}
	if h.cg != nil && h.cg.mech.freezer != "" {
		if err := h.cg.setFrozen(false); err != nil {
			return err
		}
	} else {
		for _, p := range h.stopped {
			syscall.Kill(p, syscall.SIGCONT)
		}
		h.signalAll(syscall.SIGCONT)
		h.stopped = nil
	}
	h.frozen = false
	return nil
}

// KillAll kills every process of the sandbox, including daemons that left
// the agent's session and the children of a fork bomb: the pid namespace
// dies with its PID 1, the cgroup is emptied, and without either every
// process of the agent's tree is stopped first and then killed. The
// launcher still reaps the child it started.
func (h *Handle) KillAll() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.killAllLocked()
}

func (h *Handle) killAllLocked() error {
	if h.pid == 0 {
		return nil
	}
	var errs []error
	if h.spec.Tier != driver.TierNamespace && (h.cg == nil || len(h.cg.all) == 0) {
		// No pid namespace and no cgroup: stop the whole tree so no one
		// forks or reparents, then kill it.
		h.signalAll(syscall.SIGSTOP)
		h.signalAll(syscall.SIGKILL)
	}
	if h.pidfd >= 0 {
		if err := unix.PidfdSendSignal(h.pidfd, unix.SIGKILL, nil, 0); err != nil && err != unix.ESRCH {
			errs = append(errs, fmt.Errorf("isolate: kill sandbox init: %w", err))
		}
	} else {
		syscall.Kill(h.pid, syscall.SIGKILL)
	}
	if h.cg != nil && len(h.cg.all) > 0 {
		if h.frozen && h.cg.mech.freezer != "" {
			h.cg.setFrozen(false)
		}
		if err := h.cg.killAll(); err != nil {
			errs = append(errs, err)
		}
	} else if h.frozen {
		// SIGKILL ends stopped processes too; nothing to thaw.
		h.stopped = nil
	}
	h.frozen = false
	return errors.Join(errs...)
}

// members lists the sandbox's processes without a cgroup: the members of
// its pid namespace, or in the landlock tier the descendants of its init
// (the agent is a subreaper, so orphans and setsid daemons stay below it).
func (h *Handle) members() []int {
	entries, _ := os.ReadDir("/proc")
	type proc struct{ pid, ppid int }
	var procs []proc
	var nsWant string
	if h.spec.Tier == driver.TierNamespace {
		nsWant, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", h.pid))
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if nsWant != "" {
			if ns, _ := os.Readlink("/proc/" + e.Name() + "/ns/pid"); ns == nsWant {
				out = append(out, pid)
			}
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may contain spaces and parentheses: the ppid
		// is the second field after the last ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		procs = append(procs, proc{pid, ppid})
	}
	if nsWant != "" {
		return out
	}
	in := map[int]bool{h.pid: true}
	for changed := true; changed; {
		changed = false
		for _, p := range procs {
			if !in[p.pid] && in[p.ppid] {
				in[p.pid] = true
				changed = true
			}
		}
	}
	for p := range in {
		out = append(out, p)
	}
	return out
}

// signalAll sends sig to every member until a scan finds no new one (a
// process forked during the scan is found by the next).
func (h *Handle) signalAll(sig syscall.Signal) []int {
	seen := map[int]bool{}
	for range 50 {
		fresh := 0
		for _, p := range h.members() {
			if !seen[p] {
				seen[p] = true
				fresh++
				syscall.Kill(p, sig)
			}
		}
		if fresh == 0 {
			break
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	return out
}

// Cleanup kills whatever is left, removes the cgroups and the private
// TMPDIR, and gives the workspace back to its owner. It is idempotent.
func (h *Handle) Cleanup() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cleaned {
		return nil
	}
	h.cleaned = true
	var errs []error
	if err := h.killAllLocked(); err != nil {
		errs = append(errs, err)
	}
	if h.pidfd >= 0 {
		// Wait until init is really gone (the launcher reaps it).
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			fds := []unix.PollFd{{Fd: int32(h.pidfd), Events: unix.POLLIN}}
			if n, _ := unix.Poll(fds, 10); n > 0 {
				break
			}
		}
		unix.Close(h.pidfd)
		h.pidfd = -1
	}
	if h.cg != nil {
		if err := h.cg.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.hostTemp != "" {
		if err := os.RemoveAll(h.hostTemp); err != nil {
			errs = append(errs, err)
		}
	}
	if h.lease != nil {
		// The last sandbox on the workspace gives every file back.
		if err := h.lease.release(); err != nil {
			errs = append(errs, fmt.Errorf("isolate: give the workspace back: %w", err))
		}
		h.lease = nil
	}
	return errors.Join(errs...)
}
