//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Stage values of the SANDBOXKIT_STAGE environment variable.
const (
	StageEnv   = "SANDBOXKIT_STAGE"
	StageInit  = "init"
	StageAgent = "agent"
)

// File descriptors of both stages: the configuration (read to EOF), the
// agent's stream and, with Plan.CommandsCgroup, the tasks file and the
// pids.current of the commands' pids cgroup (see CommandsCgroup).
const (
	ConfigFD         = 3
	StreamFD         = 4
	CommandsCgroupFD = 5
	CommandsPidsFD   = 6
)

// commandsCgroupFiles are the commands cgroup's files the agent gets, in
// the order of CommandsCgroupFD and CommandsPidsFD: opened by the host,
// since the agent may open neither (they are root's, and not in its mount
// namespace).
var commandsCgroupFiles = [2]struct {
	name  string
	flags int
}{{"tasks", unix.O_WRONLY}, {"pids.current", unix.O_RDONLY}}

// Enter builds the boundary described by spec (as returned by
// Handle.Spec) around the calling process and execs /proc/self/exe as
// stage agent, with fd 3 a fresh memfd holding cfg, fd 4 the stream and no
// other descriptor beyond stdio. It is the slow path, for the boundaries
// whose setup needs Go code between the steps (a disk quota, whose tmpfs
// is seeded with a copy of the workspace); Handle.Launch uses it only
// then, and otherwise runs the same steps in a vforked child with no stage
// init at all. It must run on the main goroutine locked to its thread,
// before the program starts other work; it returns only on failure,
// leaving the process half-confined: the caller reports the error and
// exits.
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
	// Out of the way of the descriptors it is moved to (it may have got
	// fd 3, freed by the caller's read of the configuration).
	if cfgFD, err = unix.FcntlInt(uintptr(cfgFD), unix.F_DUPFD_CLOEXEC, 10); err != nil {
		return fmt.Errorf("isolate: config fd: %w", err)
	}
	exeFD, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("isolate: open /proc/self/exe: %w", err)
	}
	if spec.Tier == driver.TierNamespace && os.Getpid() != 1 {
		return errors.New("isolate: the namespace tier must run as PID 1 of a new pid namespace (use Handle.SysProcAttr)")
	}
	p, err := buildProgram(&spec, stageFDs{config: cfgFD, stream: StreamFD, exe: exeFD, inPlace: true}, []string{os.Args[0]})
	if err != nil {
		return err
	}
	for next := 0; ; {
		n, hook, e := p.run(next)
		if e != 0 {
			return fmt.Errorf("isolate: %s: %w", p.ops[n].what, e)
		}
		if !hook {
			return errors.New("isolate: the setup program ended without exec")
		}
		// The only hook: seed the quota tmpfs with the workspace.
		if err := copyTree(seedDir, quotaDir); err != nil {
			return fmt.Errorf("isolate: copy the workspace into its quota tmpfs: %w", err)
		}
		next = n
	}
}

// Where a quota'd workspace is staged inside the new root before
// pivot_root: the host workspace at seedDir, its tmpfs at quotaDir.
const (
	newRoot  = "/tmp"
	seedDir  = newRoot + "/.seed"
	quotaDir = newRoot + WorkspaceInside
)

// stageFDs are the descriptors a program moves into place before execve.
type stageFDs struct {
	config, stream, exe int
	// commands are the commands cgroup's files (Plan.CommandsCgroup; see
	// commandsCgroupFiles), -1 without one.
	commands [2]int
	// stdin, stdout, stderr become fds 0-2 (vforked child only; -1 keeps
	// the inherited one).
	stdin, stdout, stderr int
	// inPlace: the program runs in stage init (Enter), where fds 0-2 and
	// the stream (already fd 4) are in place, and the process attributes
	// and cgroups were set by the launcher.
	inPlace bool
	// errW receives a failure report (vforked child).
	errW int
	// cgroupProcs are the sandbox's cgroup files, opened by the host,
	// which the vforked child joins by writing "0" (itself): "tasks" of
	// each v1 hierarchy, and cgroup.procs of the v2 one unless the child
	// was born there (see launchForked).
	cgroupProcs []int
	// root: the host runs as root, so the child drops to Plan.HostUID
	// itself before it makes its user namespace.
	root bool
	// dumpable is the host's PR_GET_DUMPABLE. The vforked child shares the
	// host's memory, and with it the "dumpable" attribute that a uid
	// change clears: the child puts the host's value back.
	dumpable int
	// netns, when above 0, is a network namespace made ahead of time with
	// lo up (netns.go), which the vforked child of a root host joins
	// instead of making one.
	netns int
}

// joinsNetns says the vforked child joins fds.netns instead of making
// its network namespace (only a root host can: see netns.go).
func (fds stageFDs) joinsNetns(spec *Spec) bool {
	return !fds.inPlace && fds.root && fds.netns > 0 && spec.Tier == driver.TierNamespace && !spec.Network
}

// buildProgram turns spec into the setup program: in a vforked child, the
// cgroups, identity and namespaces stage init would get from the launcher
// (buildLaunchPrefix); then the tier's layers (see buildNamespaces for the order
// and what each step prevents); then the descriptors, Landlock, rlimits,
// capabilities, seccomp and the execve of the agent stage.
func buildProgram(spec *Spec, fds stageFDs, argv []string) (*program, error) {
	p := &program{errFD: fds.errW}
	if !fds.inPlace {
		buildLaunchPrefix(p, spec, fds)
	}
	var pol landlockPolicy
	switch spec.Tier {
	case driver.TierNamespace:
		if err := buildNamespaces(p, spec, !fds.joinsNetns(spec)); err != nil {
			return nil, err
		}
		pol = namespacePolicy(spec)
	case driver.TierLandlock:
		if fds.inPlace && spec.Plan.DropIdentity {
			buildSwitchIdentity(p, spec.Plan.HostUID, spec.Plan.HostGID)
		}
		pol = landlockTierPolicy(spec)
	default:
		return nil, fmt.Errorf("isolate: cannot build tier %s", spec.Tier)
	}
	pol.rules = append(pol.rules, landlockRule{path: "the sandbox's own binary", fd: fds.exe, access: llExec | unix.LANDLOCK_ACCESS_FS_READ_FILE, file: true})

	// Descriptors for stage agent: 3 = config, 4 = stream, every other
	// descriptor (the runtime's, anything inherited) closed at exec.
	if !fds.inPlace {
		for i, fd := range []int{fds.stdin, fds.stdout, fds.stderr} {
			if fd >= 0 {
				p.sys(fmt.Sprintf("dup fd %d", i), unix.SYS_DUP3, uintptr(fd), uintptr(i), 0)
			} else {
				p.sys(fmt.Sprintf("keep fd %d", i), unix.SYS_FCNTL, uintptr(i), unix.F_SETFD, 0).with(opIgnoreErr)
			}
		}
	}
	p.sys("dup the config fd", unix.SYS_DUP3, uintptr(fds.config), ConfigFD, 0)
	if fds.stream == StreamFD {
		p.sys("keep the stream fd", unix.SYS_FCNTL, StreamFD, unix.F_SETFD, 0)
	} else {
		p.sys("dup the stream fd", unix.SYS_DUP3, uintptr(fds.stream), StreamFD, 0)
	}
	last := StreamFD
	if spec.Plan.CommandsCgroup {
		for i, to := range []int{CommandsCgroupFD, CommandsPidsFD} {
			last = to
			if fds.inPlace {
				p.sys("keep the commands cgroup fd", unix.SYS_FCNTL, uintptr(to), unix.F_SETFD, 0)
			} else {
				p.sys("dup the commands cgroup fd", unix.SYS_DUP3, uintptr(fds.commands[i]), uintptr(to), 0)
			}
		}
	}
	p.sys("close_range", unix.SYS_CLOSE_RANGE, uintptr(last+1), ^uintptr(0), unix.CLOSE_RANGE_CLOEXEC)

	// 5.-7. Landlock, capabilities and no_new_privs, seccomp: all on this
	// thread, which then execs; the new image inherits exactly its state.
	sock := allSockets
	if spec.Tier == driver.TierLandlock {
		sock = landlockTierSockets(spec.Network, spec.Plan.LandlockABI)
	}
	// The landlock tier shares the host's IPC namespace.
	filter, err := seccompProgram(runtime.GOARCH, sock, spec.Tier == driver.TierLandlock)
	if err != nil {
		return nil, err
	}
	// no_new_privs comes first (Landlock and seccomp need it without
	// CAP_SYS_ADMIN); capabilities go last but before seccomp, which
	// would not stop capset anyway.
	p.sys("PR_SET_NO_NEW_PRIVS", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if spec.Plan.LandlockABI > 0 {
		if err := buildLandlock(p, pol); err != nil {
			return nil, err
		}
	}
	// Only the namespace tier holds capabilities here (in its own user
	// namespace); the landlock tier dropped them with its identity or
	// never had any.
	buildDropPrivileges(p, spec.Tier == driver.TierNamespace)
	// 4. rlimits (per-command ones come from WrapCommand). Pids fall
	// back to RLIMIT_NPROC without a pids cgroup. After the Landlock
	// steps: in a vforked child every descriptor of the host is still open
	// until execve, and a low RLIMIT_NOFILE would make their opens fail.
	for _, r := range rlimitsFor(spec.Limits, !spec.Plan.PidsCgroup && !spec.Plan.NprocShared) {
		lim := &unix.Rlimit{Cur: r.v, Max: r.v}
		p.sys(fmt.Sprintf("%s=%d", r.name, r.v), unix.SYS_PRLIMIT64, 0, uintptr(r.res), addr(p, lim), 0)
	}

	p.keep = append(p.keep, filter)
	fprog := &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	p.sys("seccomp(SET_MODE_FILTER)", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, addr(p, fprog))
	if !fds.inPlace {
		p.sys("restore the signal mask", unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&p.oldMask)), 0, 8)
	}
	env := []string{StageEnv + "=" + StageAgent}
	if spec.Limits.Pids <= 0 || spec.Plan.CommandsCgroup {
		// The agent waits far more than it computes and narrows itself
		// to one P anyway; starting with one saves the runtime the
		// threads and per-P state of the others. Not where it warms its
		// threads first (CompleteAsync), which one P would serialize.
		env = append(env, "GOMAXPROCS=1")
	}
	p.sys("exec stage agent", unix.SYS_EXECVEAT, uintptr(fds.exe), p.str(""), p.strv(argv), p.strv(env), unix.AT_EMPTY_PATH)
	return p, nil
}

// buildLaunchPrefix adds what a vforked child of the host does before the
// boundary's layers: join the sandbox's cgroups (while it still has the
// host's credentials), then in the namespace tier drop to the sandbox's
// host uid, make the user namespace and write its own uid and gid maps
// (mapping the uid it runs as, which needs no privilege), unshare the
// other namespaces and vfork PID 1 of the new pid namespace as a child of
// the host (CLONE_PARENT); this process exits once PID 1 has exec'd. The
// rest of the program runs in PID 1.
func buildLaunchPrefix(p *program, spec *Spec, fds stageFDs) {
	for i, fd := range fds.cgroupProcs {
		p.sys(fmt.Sprintf("join cgroup %d", i), unix.SYS_WRITE, uintptr(fd), p.str("0"), 1)
	}
	if spec.Tier != driver.TierNamespace {
		// Its own session: the host terminal's job-control signals do
		// not reach the sandbox.
		p.sys("setsid", unix.SYS_SETSID)
		if spec.Plan.DropIdentity {
			buildSwitchIdentity(p, spec.Plan.HostUID, spec.Plan.HostGID)
			p.sys("restore the host's dumpable flag", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, uintptr(fds.dumpable))
		}
		// No parent-death signal: the landlock tier's agent is no PID 1,
		// and killed it would leave its commands behind. It notices the
		// host's death as the end of its stream instead, and kills what
		// it started.
		return
	}
	uid, gid := spec.Plan.HostUID, spec.Plan.HostGID
	joinNet := fds.joinsNetns(spec)
	if joinNet {
		// A namespace made ahead of time (netns.go). Joining one owned by
		// the host's user namespace takes the host's CAP_SYS_ADMIN: before
		// the identity switch.
		p.sys("join the network namespace", unix.SYS_SETNS, uintptr(fds.netns), unix.CLONE_NEWNET)
	}
	if fds.root {
		buildSwitchIdentity(p, uid, gid)
	}
	// An undumpable process (after a uid change, or a host that made
	// itself so) has root-owned /proc files: it could not write its own
	// maps. The flag belongs to the memory the child shares with the host,
	// whose value is put back once the maps are written. (Only this
	// sandbox's processes could run as its uid, and none exists yet;
	// inside, seccomp denies ptrace anyway.)
	setDumpable := fds.root || fds.dumpable != 1
	if setDumpable {
		p.sys("PR_SET_DUMPABLE", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 1)
	}
	p.sys("unshare the user namespace", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	for _, f := range [][2]string{{"setgroups", "deny"}, {"uid_map", fmt.Sprintf("0 %d 1\n", uid)}, {"gid_map", fmt.Sprintf("0 %d 1\n", gid)}} {
		s := p.slot()
		p.sys("open /proc/self/"+f[0], unix.SYS_OPENAT, atCWD, p.str("/proc/self/"+f[0]), unix.O_WRONLY|unix.O_CLOEXEC).into(s)
		p.sys("write /proc/self/"+f[0], unix.SYS_WRITE, 0, p.str(f[1]), uintptr(len(f[1]))).slotArg(0, s)
		p.sys("close /proc/self/"+f[0], unix.SYS_CLOSE, 0).slotArg(0, s)
	}
	if setDumpable {
		p.sys("restore the host's dumpable flag", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, uintptr(fds.dumpable))
	}
	// The cgroup namespace is entered later, by PID 1 after its mounts,
	// so that its root is the sandbox's own cgroup.
	ns := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if !spec.Network && !joinNet {
		ns |= unix.CLONE_NEWNET
	}
	p.sys("unshare the namespaces", unix.SYS_UNSHARE, ns)
	p.ops = append(p.ops, sysOp{kind: opVfork, what: "start PID 1",
		args: [6]uintptr{unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PARENT | unix.CLONE_PARENT_SETTID | uintptr(unix.SIGCHLD), addr(p, &p.pid1)}})
	p.sys("setsid", unix.SYS_SETSID)
	// PID 1's parent is the launcher thread, which lives as long as the
	// host process; its death ends every process of the sandbox.
	p.sys("PR_SET_PDEATHSIG", unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL))
}

// buildSwitchIdentity makes the process uid/gid with no supplementary
// groups: a root host's landlock tier, or its namespace tier before it
// makes the user namespace.
func buildSwitchIdentity(p *program, uid, gid int) {
	p.sys("setgroups", unix.SYS_SETGROUPS, 0, 0)
	p.sys("setresgid", unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid))
	p.sys("setresuid", unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid))
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

// landlockTierDevices are the device files the landlock tier opens to
// sandboxes (the namespace tier mounts the same ones in its own /dev).
var landlockTierDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}

// landlockTierPolicy is the only filesystem wall of the landlock tier:
// read-only system paths, read-write workspace and private TMPDIR, a few
// device files, the ptys and /proc; nothing else of the host is reachable.
func landlockTierPolicy(spec *Spec) landlockPolicy {
	pol := landlockPolicy{abi: spec.Plan.LandlockABI, denyTCP: !spec.Network}
	for _, p := range spec.readOnlyPaths() {
		pol.rules = append(pol.rules, landlockRule{path: p, fd: -1, access: llRead | llExec, host: true})
	}
	rw := uint64(llAll &^ unix.LANDLOCK_ACCESS_FS_IOCTL_DEV)
	pol.rules = append(pol.rules,
		landlockRule{path: spec.HostWorkspace, fd: -1, access: rw, host: true},
		landlockRule{path: spec.Plan.TmpDir, fd: -1, access: rw, host: true},
		landlockRule{path: "/proc", fd: -1, access: llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE, host: true},
	)
	// The devices programs use, one by one, and the ptys of bash
	// sessions. Not all of /dev: the host's /dev/shm (POSIX shared memory
	// of the host's programs and of other sandboxes) and /dev/mqueue are
	// below it, and a rule on /dev let a sandbox read them
	// (TestLandlockTierKeepsHostSharedMemoryOut).
	dev := uint64(unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV)
	for _, d := range landlockTierDevices {
		pol.rules = append(pol.rules, landlockRule{path: d, fd: -1, access: dev, host: true})
	}
	pol.rules = append(pol.rules, landlockRule{path: "/dev/pts", fd: -1, access: dev | unix.LANDLOCK_ACCESS_FS_READ_DIR, host: true})
	return pol
}

// CommandsCgroup is the commands' pids cgroup as the agent holds it,
// where the sandbox has one (Plan.CommandsCgroup): a child of the
// sandbox's v1 pids cgroup, limited to Limits.Pids, that every command
// must be in before it runs, while the agent's own threads keep
// AgentTaskReserve tasks of room in the parent (a fork bomb fills the
// child, and the agent can still make the threads its runtime needs).
//
// A v1 cgroup moves single threads: writing "0" to Tasks moves the
// writing thread only, and takes no RCU grace period (unlike a move of a
// whole thread group through cgroup.procs: docs/isolation.md), ~4 µs
// here. A command joins in one of two ways. A runner that runs code in
// the forked child (linuxrunner's own clone) has the child move itself
// before execve, and check Current against Max there: a move is never
// refused by the pids controller, so without the check a command could
// start, one over the limit, while a fork bomb holds it full (see
// linuxrunner.Cgroup). Other runners (os/exec) start every command from
// one thread of the agent that joined the cgroup (Spawn), so the clone
// itself is refused at the limit; that costs each start a hand-off to
// that thread and back, two thread wake-ups.
type CommandsCgroup struct {
	// Tasks is the cgroup's "tasks" file, open for writing, and Current
	// its "pids.current", open for reading; both close-on-exec.
	Tasks, Current int
	// Max is the cgroup's pids.max (Limits.Pids), set by Check.
	Max int

	spawnOnce sync.Once
	reqs      chan func()
	joined    chan struct{}
	joinErr   error
}

// TakeCommandsCgroup returns the commands' cgroup if the process was given
// its files (CommandsCgroupFD, CommandsPidsFD), nil otherwise, and marks
// them close-on-exec: no command may inherit them. Call it first thing in
// stage agent, before anything can start a process.
func TakeCommandsCgroup() *CommandsCgroup {
	// Without a commands cgroup the descriptor numbers are free, and
	// something that ran before (an init function, the runtime) may hold
	// them: they count only if they are that cgroup's files.
	for i, fd := range []int{CommandsCgroupFD, CommandsPidsFD} {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != unix.CGROUP_SUPER_MAGIC {
			return nil
		}
		if name, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || !strings.HasSuffix(name, "/"+commandsCgroup+"/"+commandsCgroupFiles[i].name) {
			return nil
		}
	}
	for _, fd := range []int{CommandsCgroupFD, CommandsPidsFD} {
		unix.CloseOnExec(fd)
	}
	return &CommandsCgroup{Tasks: CommandsCgroupFD, Current: CommandsPidsFD}
}

// Check checks c against spec (a sandbox with a commands cgroup must have
// its files, one without must not) and sets Max.
func (c *CommandsCgroup) Check(spec Spec) error {
	want := spec.Plan != nil && spec.Plan.CommandsCgroup
	switch {
	case want && c == nil:
		return errors.New("isolate: the sandbox has a commands cgroup but the agent got no descriptors for it")
	case !want && c != nil:
		return errors.New("isolate: the agent got commands cgroup descriptors its sandbox does not have")
	case c != nil:
		c.Max = spec.Limits.Pids
	}
	return nil
}

// Spawn runs start on a thread of the agent that has joined the cgroup
// (made on first use, locked, never unlocked), so that the processes it
// starts are born there. If the move failed, every start fails with that
// error: no command runs outside the limit.
func (c *CommandsCgroup) Spawn(start func() error) error {
	c.spawnOnce.Do(func() {
		c.reqs, c.joined = make(chan func()), make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: this thread is in another cgroup
			zero := []byte("0")
			if _, err := unix.Write(c.Tasks, zero); err != nil {
				c.joinErr = fmt.Errorf("isolate: join the commands' pids cgroup: %w", err)
			}
			close(c.joined)
			if c.joinErr != nil {
				return
			}
			for start := range c.reqs {
				start()
			}
		}()
	})
	<-c.joined
	if c.joinErr != nil {
		return c.joinErr
	}
	done := make(chan error, 1)
	c.reqs <- func() { done <- start() }
	return <-done
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
	if spec.Limits.Pids <= 0 || spec.Plan.CommandsCgroup {
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

// buildNamespaces adds steps 1-3 of the layering: the new root,
// pivot_root, hostname, loopback (loUp: not in a network namespace made
// ahead of time, whose lo is up already and which root inside could not
// change). They run as uid 0 of the new user namespace with full
// capabilities there and none on the host, in PID 1 of the new pid
// namespace. The host paths are looked at here, by the builder, whose view
// of them is the one the new mount namespace copied.
func buildNamespaces(p *program, spec *Spec, loUp bool) error {
	// Nothing done below may propagate back to the host's mounts.
	p.sys("make / private", unix.SYS_MOUNT, p.str(""), p.str("/"), p.str(""), unix.MS_REC|unix.MS_PRIVATE, 0)
	// Detached, recursive, read-only clones of the host paths, made
	// before anything hides them. mount_setattr(AT_RECURSIVE) is the only
	// way to make every submount read-only: MS_REMOUNT|MS_RDONLY is not
	// recursive and let a sandbox write into /sys/fs/cgroup.
	clone := func(host string, attr uint64, flags uintptr) int {
		s := p.slot()
		p.sys("open_tree "+host, unix.SYS_OPEN_TREE, atCWD, p.str(host), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|flags).into(s)
		ma := &unix.MountAttr{Attr_set: attr}
		p.sys("mount_setattr "+host, unix.SYS_MOUNT_SETATTR, 0, p.str(""), unix.AT_EMPTY_PATH|flags, addr(p, ma), unsafe.Sizeof(*ma)).slotArg(0, s)
		return s
	}
	type tree struct {
		inside string
		slot   int
		link   string // symlink target instead of a tree
	}
	var trees []tree
	const roAttr = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	for _, path := range spec.readOnlyPaths() {
		fi, err := os.Lstat(path)
		if err != nil {
			continue // the host lacks it
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(path)
			if err != nil {
				return fmt.Errorf("isolate: %w", err)
			}
			trees = append(trees, tree{inside: path, link: target})
			continue
		}
		trees = append(trees, tree{inside: path, slot: clone(path, roAttr, unix.AT_RECURSIVE)})
	}
	wsSlot := clone(spec.HostWorkspace, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, unix.AT_RECURSIVE)
	devs := []string{"null", "zero", "full", "random", "urandom", "tty"}
	devSlots := make([]int, len(devs))
	for i, d := range devs {
		devSlots[i] = clone("/dev/"+d, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, 0)
	}

	in := func(path string) string { return filepath.Join(newRoot, path) }
	made := map[string]bool{newRoot: true}
	var mkdirs func(path string)
	mkdirs = func(path string) {
		full := in(path)
		if made[full] {
			return
		}
		if parent := filepath.Dir(path); parent != path {
			mkdirs(parent)
		}
		made[full] = true
		p.sys("mkdir "+full, unix.SYS_MKDIRAT, atCWD, p.str(full), 0o755).with(opOKExist)
	}
	attach := func(s int, inside string) {
		p.sys("attach "+inside, unix.SYS_MOVE_MOUNT, 0, p.str(""), atCWD, p.str(in(inside)), unix.MOVE_MOUNT_F_EMPTY_PATH).slotArg(0, s)
		p.sys("close the tree of "+inside, unix.SYS_CLOSE, 0).slotArg(0, s)
	}
	mount := func(what, source, inside, fstype string, flags uintptr, data string) {
		p.sys(what, unix.SYS_MOUNT, p.str(source), p.str(in(inside)), p.str(fstype), flags, p.str(data))
	}
	symlink := func(target, inside string) {
		p.sys("symlink "+in(inside), unix.SYS_SYMLINKAT, p.str(target), atCWD, p.str(in(inside)))
	}

	// 1. The new root: a small tmpfs holding only mount points. The host's
	// /tmp is covered by it in this mount namespace only; every host path
	// needed later is already held as a detached tree.
	p.sys("mount the root tmpfs", unix.SYS_MOUNT, p.str("sandboxkit-root"), p.str(newRoot), p.str("tmpfs"),
		unix.MS_NOSUID|unix.MS_NODEV, p.str("size=1m,nr_inodes=4096,mode=0755"))
	// 2. Read-only system paths at their usual places.
	for _, t := range trees {
		if t.link != "" {
			mkdirs(filepath.Dir(t.inside))
			symlink(t.link, t.inside)
			continue
		}
		mkdirs(t.inside)
		attach(t.slot, t.inside)
	}
	// The workspace: the host directory itself, or with a disk quota a
	// tmpfs of that size holding a copy of it (made by Enter's hook).
	mkdirs(WorkspaceInside)
	if q := spec.Limits.DiskBytes; q > 0 {
		mkdirs("/.seed")
		attach(wsSlot, "/.seed")
		mount("mount the workspace tmpfs", "sandboxkit-workspace", WorkspaceInside, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
			fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", q, inodesFor(q)))
		p.hook("copy the workspace into its quota tmpfs")
		p.sys("detach the seed", unix.SYS_UMOUNT2, p.str(seedDir), unix.MNT_DETACH)
		p.sys("remove the seed mount point", unix.SYS_UNLINKAT, atCWD, p.str(seedDir), unix.AT_REMOVEDIR)
	} else {
		attach(wsSlot, WorkspaceInside)
	}
	// A private /tmp with a hard size: ENOSPC at the limit.
	mkdirs("/tmp")
	tb := spec.tmpBytes()
	mount("mount /tmp", "sandboxkit-tmp", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", tb, inodesFor(tb)))
	// A fresh /proc shows only this pid namespace. It must be mounted
	// while the host's /proc is still visible (the kernel refuses a proc
	// mount in a user namespace that could not see one).
	mkdirs("/proc")
	mount("mount /proc", "proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	// A minimal /dev: the harmless character devices, a private devpts.
	mkdirs("/dev")
	mount("mount /dev", "sandboxkit-dev", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
	for i, d := range devs {
		s := p.slot()
		p.sys("create /dev/"+d, unix.SYS_OPENAT, atCWD, p.str(in("/dev/"+d)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o666).into(s)
		p.sys("close /dev/"+d, unix.SYS_CLOSE, 0).slotArg(0, s)
		attach(devSlots[i], "/dev/"+d)
	}
	mkdirs("/dev/pts")
	mount("mount devpts", "devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
	for _, l := range [][2]string{{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}, {"shm", "/tmp"}} {
		symlink(l[1], "/dev/"+l[0])
	}
	ro := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	p.sys("make /dev read-only", unix.SYS_MOUNT_SETATTR, atCWD, p.str(in("/dev")), 0, addr(p, ro), unsafe.Sizeof(*ro))
	// The root itself read-only: no new top-level files or mount points.
	p.sys("make / read-only", unix.SYS_MOUNT_SETATTR, atCWD, p.str(newRoot), 0, addr(p, ro), unsafe.Sizeof(*ro))
	// pivot_root(".", ".") stacks the old root on the new one; the detach
	// then drops every host mount from this namespace.
	p.sys("chdir to the new root", unix.SYS_CHDIR, p.str(newRoot))
	p.sys("pivot_root", unix.SYS_PIVOT_ROOT, p.str("."), p.str("."))
	p.sys("detach the old root", unix.SYS_UMOUNT2, p.str("."), unix.MNT_DETACH)
	p.sys("chdir /", unix.SYS_CHDIR, p.str("/"))
	// Its own cgroup namespace, now that the host has put it in its
	// cgroups: /proc/self/cgroup shows "/" and no host path.
	p.sys("unshare the cgroup namespace", unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP)
	// 3. Hostname, loopback.
	host := spec.Hostname
	if host == "" {
		host = "sandbox"
	}
	p.sys("sethostname", unix.SYS_SETHOSTNAME, p.str(host), uintptr(len(host)))
	if !spec.Network && loUp {
		// Programs inside may talk to themselves over 127.0.0.1, and
		// there is no other interface.
		s := p.slot()
		p.sys("socket for lo", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0).into(s)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
		p.keep = append(p.keep, ifr)
		p.sys("bring lo up", unix.SYS_IOCTL, 0, unix.SIOCSIFFLAGS, uintptr(unsafe.Pointer(ifr))).slotArg(0, s)
		p.sys("close the lo socket", unix.SYS_CLOSE, 0).slotArg(0, s)
	}
	return nil
}

// inodesFor bounds a tmpfs's inode count by its size (one inode per 4 KiB,
// at least 1024) so that a flood of empty files also stops.
func inodesFor(size int64) int64 {
	return max(size/4096, 1024)
}
