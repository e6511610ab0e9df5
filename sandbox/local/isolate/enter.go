package isolate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Stage values of the SANDBOXKIT_STAGE environment variable.
const (
	StageEnv   = "SANDBOXKIT_STAGE"
	StageInit  = "init"
	StageAgent = "agent"
)

// File descriptors of both stages: the configuration (read to EOF) and
// the agent's stream.
const (
	ConfigFD = 3
	StreamFD = 4
)

// Enter builds the boundary described by spec (as returned by
// Handle.Spec) around the calling process and execs /proc/self/exe as
// stage agent, with fd 3 a fresh memfd holding cfg, fd 4 the stream and no
// other descriptor beyond stdio. It must run on the main goroutine locked
// to its thread, before the program starts other work; it returns only on
// failure, leaving the process half-confined: the caller reports the error
// and exits.
func Enter(spec Spec, cfg []byte) error {
	runtime.LockOSThread() // never unlocked: this thread execs or dies
	if spec.Plan == nil {
		return errors.New("isolate: Enter needs the Spec returned by Handle.Spec (Prepare's plan is missing)")
	}
	// The memfd is prepared first: after the restrictions memfd_create
	// still works, but failing early keeps the error path simple.
	cfgFD, err := unix.MemfdCreate("sandboxkit-config", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("isolate: memfd_create: %w", err)
	}
	if _, err := unix.Write(cfgFD, cfg); err != nil {
		return fmt.Errorf("isolate: write config: %w", err)
	}
	if _, err := unix.Seek(cfgFD, 0, 0); err != nil {
		return fmt.Errorf("isolate: seek config: %w", err)
	}
	exe, err := exeRule()
	if err != nil {
		return err
	}
	var pol landlockPolicy
	switch spec.Tier {
	case driver.TierNamespace:
		if err := enterNamespaces(&spec); err != nil {
			return err
		}
		pol = namespacePolicy(&spec)
	case driver.TierLandlock:
		if spec.Plan.DropIdentity {
			if err := switchIdentity(spec.Plan.HostUID, spec.Plan.HostGID); err != nil {
				return err
			}
		}
		pol = landlockTierPolicy(&spec)
	default:
		return fmt.Errorf("isolate: Enter cannot build tier %s", spec.Tier)
	}
	pol.rules = append(pol.rules, exe)

	// 4. rlimits (per-command ones come from WrapCommand). Pids fall
	// back to RLIMIT_NPROC without a pids cgroup.
	if err := applyRlimits(spec.Limits, !spec.Plan.PidsCgroup && !spec.Plan.NprocShared); err != nil {
		return err
	}

	// Descriptors for stage 2: 3 = config, 4 = stream, every other
	// descriptor (the Go runtime's, anything inherited) closed at exec.
	if cfgFD == ConfigFD {
		if _, err := unix.FcntlInt(ConfigFD, unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("isolate: config fd: %w", err)
		}
	} else if err := unix.Dup3(cfgFD, ConfigFD, 0); err != nil {
		return fmt.Errorf("isolate: dup config fd: %w", err)
	}
	if _, err := unix.FcntlInt(StreamFD, unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("isolate: stream fd %d: %w", StreamFD, err)
	}
	if err := unix.CloseRange(StreamFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("isolate: close_range: %w", err)
	}

	// 5.-7. Landlock, capabilities and no_new_privs, seccomp: all on this
	// thread, which then execs; the new image inherits exactly its state.
	prog, err := seccompProgram(spec.Tier == driver.TierLandlock && !spec.Network)
	if err != nil {
		return err
	}
	// no_new_privs comes first (Landlock and seccomp need it without
	// CAP_SYS_ADMIN); capabilities go last but before seccomp, which
	// would not stop capset anyway.
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("isolate: PR_SET_NO_NEW_PRIVS: %w", e)
	}
	if spec.Plan.LandlockABI > 0 {
		if err := restrictLandlock(pol); err != nil {
			return err
		}
	}
	if err := dropPrivileges(); err != nil {
		return err
	}
	if err := installSeccomp(prog); err != nil {
		return err
	}
	argv := []string{os.Args[0]}
	path := "/proc/self/exe"
	env := []string{StageEnv + "=" + StageAgent}
	err = syscall.Exec(path, argv, env)
	return fmt.Errorf("isolate: exec stage agent: %w", err)
}

// namespacePolicy is the Landlock layer of the namespace tier. The mount
// namespace already shows only what the sandbox may see; Landlock repeats
// the read-only/read-write split in the kernel's other mediation path, so a
// mistake in the mount setup does not become a write to the host.
func namespacePolicy(spec *Spec) landlockPolicy {
	return landlockPolicy{abi: spec.Plan.LandlockABI, rules: []landlockRule{
		{path: "/", fd: -1, access: llRead | llExec},
		{path: WorkspaceInside, fd: -1, access: llAll &^ unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		{path: "/tmp", fd: -1, access: llAll &^ unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		{path: "/dev", fd: -1, access: llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		{path: "/proc", fd: -1, access: llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE},
	}}
}

// landlockTierPolicy is the only filesystem wall of the landlock tier:
// read-only system paths, read-write workspace and private TMPDIR, the
// terminal devices and /proc; nothing else of the host is reachable.
func landlockTierPolicy(spec *Spec) landlockPolicy {
	pol := landlockPolicy{abi: spec.Plan.LandlockABI, denyTCP: !spec.Network}
	for _, p := range spec.readOnlyPaths() {
		pol.rules = append(pol.rules, landlockRule{path: p, fd: -1, access: llRead | llExec})
	}
	rw := uint64(llAll &^ unix.LANDLOCK_ACCESS_FS_IOCTL_DEV)
	pol.rules = append(pol.rules,
		landlockRule{path: spec.HostWorkspace, fd: -1, access: rw},
		landlockRule{path: spec.Plan.TmpDir, fd: -1, access: rw},
		landlockRule{path: "/dev", fd: -1, access: llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		landlockRule{path: "/proc", fd: -1, access: llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE},
	)
	return pol
}

// Complete runs at the start of stage agent, before it serves anything. It
// checks that Enter's restrictions are really in force (so a launcher bug
// that skipped Enter cannot serve an unconfined agent) and, in the landlock
// tier, makes the agent a child subreaper so that daemons which leave its
// session stay in its tree, where KillAll finds them. With a pids limit it
// also warms the agent's threads (see CompleteAsync) and returns once they
// are ready.
func Complete(spec Spec) error {
	ready, err := CompleteAsync(spec)
	if err != nil {
		return err
	}
	<-ready
	return nil
}

// CompleteAsync is Complete without the wait: the checks are done when it
// returns, and processesReady is closed once the agent's threads are warm.
// The agent must start no process before then — a fork bomb that filled
// the pids limit first would leave the agent's runtime unable to create
// the threads it needs — but it may answer the handshake and serve
// requests that start none, so the warm-up (several ms: one clone per
// thread) overlaps them instead of delaying the sandbox's readiness.
func CompleteAsync(spec Spec) (processesReady <-chan struct{}, err error) {
	ready := make(chan struct{})
	if spec.Tier != driver.TierNamespace && spec.Tier != driver.TierLandlock {
		close(ready)
		return ready, nil
	}
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000"} {
		if !strings.Contains(string(st), want+"\n") {
			return nil, fmt.Errorf("isolate: the sandbox boundary is not in force (%q missing in /proc/self/status): was Enter skipped?", want)
		}
	}
	if spec.Tier == driver.TierLandlock {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("isolate: PR_SET_CHILD_SUBREAPER: %w", err)
		}
	}
	if spec.Limits.Pids <= 0 {
		close(ready)
		return ready, nil
	}
	go func() {
		warmThreads(agentWarmThreads)
		close(ready)
	}()
	return ready, nil
}

// warmThreads makes the Go runtime create n OS threads now, while the
// pids limit has room: each goroutine holds its own thread until all are
// running. After UnlockOSThread the threads stay in the runtime's idle
// pool and serve later blocking syscalls.
func warmThreads(n int) {
	var ready sync.WaitGroup
	release := make(chan struct{})
	var done sync.WaitGroup
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}

// enterNamespaces does steps 1-3 of the layering: the new root, pivot_root,
// hostname, loopback. It runs as uid 0 of the new user namespace with full
// capabilities there and none on the host.
func enterNamespaces(spec *Spec) error {
	if os.Getpid() != 1 {
		return errors.New("isolate: the namespace tier must run as PID 1 of a new pid namespace (use Handle.SysProcAttr)")
	}
	// Nothing done below may propagate back to the host's mounts.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("isolate: make / private: %w", err)
	}
	// Detached, recursive, read-only clones of the host paths, made
	// before anything hides them. mount_setattr(AT_RECURSIVE) is the only
	// way to make every submount read-only: MS_REMOUNT|MS_RDONLY is not
	// recursive and let a sandbox write into /sys/fs/cgroup.
	type tree struct {
		inside string
		fd     int
		link   string // symlink target instead of a tree
	}
	var trees []tree
	defer func() {
		for _, t := range trees {
			if t.fd >= 0 {
				unix.Close(t.fd)
			}
		}
	}()
	clone := func(host string, attr uint64) (int, error) {
		fd, err := unix.OpenTree(unix.AT_FDCWD, host, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return -1, fmt.Errorf("isolate: open_tree %s: %w", host, err)
		}
		ma := unix.MountAttr{Attr_set: attr}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &ma); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("isolate: mount_setattr %s: %w", host, err)
		}
		return fd, nil
	}
	const roAttr = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	for _, p := range spec.readOnlyPaths() {
		fi, err := os.Lstat(p)
		if err != nil {
			continue // the host lacks it
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("isolate: %w", err)
			}
			trees = append(trees, tree{inside: p, fd: -1, link: target})
			continue
		}
		fd, err := clone(p, roAttr)
		if err != nil {
			return err
		}
		trees = append(trees, tree{inside: p, fd: fd})
	}
	wsFD, err := clone(spec.HostWorkspace, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return err
	}
	defer unix.Close(wsFD)
	devFDs := map[string]int{}
	defer func() {
		for _, fd := range devFDs {
			unix.Close(fd)
		}
	}()
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/"+d, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("isolate: open_tree /dev/%s: %w", d, err)
		}
		ma := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &ma); err != nil {
			unix.Close(fd)
			return fmt.Errorf("isolate: mount_setattr /dev/%s: %w", d, err)
		}
		devFDs[d] = fd
	}

	// 1. The new root: a small tmpfs holding only mount points. The host's
	// /tmp is covered by it in this mount namespace only; every host path
	// needed later is already held as a detached tree.
	const newRoot = "/tmp"
	if err := unix.Mount("sandboxkit-root", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755"); err != nil {
		return fmt.Errorf("isolate: mount root tmpfs: %w", err)
	}
	in := func(p string) string { return filepath.Join(newRoot, p) }
	mkdirs := func(p string) error {
		if err := os.MkdirAll(in(p), 0o755); err != nil {
			return fmt.Errorf("isolate: %w", err)
		}
		return nil
	}
	attach := func(fd int, inside string) error {
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, in(inside), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("isolate: attach %s: %w", inside, err)
		}
		return nil
	}
	// 2. Read-only system paths at their usual places.
	for _, t := range trees {
		if t.link != "" {
			if err := mkdirs(filepath.Dir(t.inside)); err != nil {
				return err
			}
			if err := os.Symlink(t.link, in(t.inside)); err != nil {
				return fmt.Errorf("isolate: %w", err)
			}
			continue
		}
		if err := mkdirs(t.inside); err != nil {
			return err
		}
		if err := attach(t.fd, t.inside); err != nil {
			return err
		}
	}
	// The workspace: the host directory itself, or with a disk quota a
	// tmpfs of that size holding a copy of it.
	if err := mkdirs(WorkspaceInside); err != nil {
		return err
	}
	if q := spec.Limits.DiskBytes; q > 0 {
		if err := mkdirs("/.seed"); err != nil {
			return err
		}
		if err := attach(wsFD, "/.seed"); err != nil {
			return err
		}
		if err := unix.Mount("sandboxkit-workspace", in(WorkspaceInside), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
			fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", q, inodesFor(q))); err != nil {
			return fmt.Errorf("isolate: mount workspace tmpfs: %w", err)
		}
		if err := copyTree(in("/.seed"), in(WorkspaceInside)); err != nil {
			return fmt.Errorf("isolate: copy the workspace into its quota tmpfs: %w", err)
		}
		if err := unix.Unmount(in("/.seed"), unix.MNT_DETACH); err != nil {
			return fmt.Errorf("isolate: %w", err)
		}
		os.Remove(in("/.seed"))
	} else if err := attach(wsFD, WorkspaceInside); err != nil {
		return err
	}
	// A private /tmp with a hard size: ENOSPC at the limit.
	if err := mkdirs("/tmp"); err != nil {
		return err
	}
	tb := spec.tmpBytes()
	if err := unix.Mount("sandboxkit-tmp", in("/tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", tb, inodesFor(tb))); err != nil {
		return fmt.Errorf("isolate: mount /tmp: %w", err)
	}
	// A fresh /proc shows only this pid namespace. It must be mounted
	// while the host's /proc is still visible (the kernel refuses a proc
	// mount in a user namespace that could not see one).
	if err := mkdirs("/proc"); err != nil {
		return err
	}
	if err := unix.Mount("proc", in("/proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("isolate: mount /proc: %w", err)
	}
	// A minimal /dev: the harmless character devices, a private devpts.
	if err := mkdirs("/dev"); err != nil {
		return err
	}
	if err := unix.Mount("sandboxkit-dev", in("/dev"), "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("isolate: mount /dev: %w", err)
	}
	for d, fd := range devFDs {
		f, err := os.OpenFile(in("/dev/"+d), os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("isolate: %w", err)
		}
		f.Close()
		if err := attach(fd, "/dev/"+d); err != nil {
			return err
		}
	}
	if err := mkdirs("/dev/pts"); err != nil {
		return err
	}
	if err := unix.Mount("devpts", in("/dev/pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("isolate: mount devpts: %w", err)
	}
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "shm": "/tmp"} {
		if err := os.Symlink(target, in("/dev/"+name)); err != nil {
			return fmt.Errorf("isolate: %w", err)
		}
	}
	ro := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, in("/dev"), 0, &ro); err != nil {
		return fmt.Errorf("isolate: make /dev read-only: %w", err)
	}
	// The root itself read-only: no new top-level files or mount points.
	if err := unix.MountSetattr(unix.AT_FDCWD, newRoot, 0, &ro); err != nil {
		return fmt.Errorf("isolate: make / read-only: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on the new one; the detach
	// then drops every host mount from this namespace.
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("isolate: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("isolate: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("isolate: detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("isolate: %w", err)
	}
	// Its own cgroup namespace, now that Started has put it in its
	// cgroups: /proc/self/cgroup shows "/" and no host path.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("isolate: unshare cgroup namespace: %w", err)
	}
	// 3. Hostname, loopback.
	host := spec.Hostname
	if host == "" {
		host = "sandbox"
	}
	if err := unix.Sethostname([]byte(host)); err != nil {
		return fmt.Errorf("isolate: sethostname: %w", err)
	}
	if !spec.Network {
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	return nil
}

// inodesFor bounds a tmpfs's inode count by its size (one inode per 4 KiB,
// at least 1024) so that a flood of empty files also stops.
func inodesFor(size int64) int64 {
	return max(size/4096, 1024)
}

// loopbackUp brings up lo in the new net namespace: programs inside may
// talk to themselves over 127.0.0.1, and there is no other interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("isolate: socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("isolate: lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("isolate: lo up: %w", err)
	}
	return nil
}
