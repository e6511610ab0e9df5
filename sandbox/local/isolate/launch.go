//go:build linux

package isolate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/internal/vfork"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// LaunchRequest is the sandbox's first process, which Handle.Launch
// starts inside the boundary: the agent stage of a binary that handles
// StageEnv.
type LaunchRequest struct {
	// Exe is the binary; "" means /proc/self/exe.
	Exe string
	// Args is its argv.
	Args []string
	// Config is what the process reads from ConfigFD.
	Config []byte
	// Stream becomes StreamFD.
	Stream *os.File
	// Stdout and Stderr become fds 1 and 2; nil means /dev/null.
	Stdout, Stderr *os.File
}

// Launch starts the sandbox's agent inside the boundary and places it in
// its cgroups. Where every step of the setup is a plain system call, it
// vforks the host process and builds the boundary in the child, which then
// execs the agent stage: one exec in all. A boundary that needs
// Go code in its setup (a disk quota, whose tmpfs is seeded with a copy of
// the workspace) is built by stage init instead, which Launch starts with
// SysProcAttr and which calls Enter. The returned process is the agent
// (or stage init, which becomes it); the caller waits for it.
func (h *Handle) Launch(req LaunchRequest) (*os.Process, error) {
	if req.Exe == "" {
		req.Exe = "/proc/self/exe"
	}
	if len(req.Args) == 0 {
		req.Args = []string{"sandboxkit-agent"}
	}
	if h.spec.Limits.DiskBytes > 0 || !vforkLaunch {
		return h.launchStaged(req)
	}
	// PR_SET_DUMPABLE cannot set 2 (SUID_DUMP_ROOT) back after the
	// vforked child's uid change has cleared it (see stageFDs.dumpable).
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d > 1 {
		return h.launchStaged(req)
	}
	return h.launchForked(req)
}

// vforkLaunch says Launch may take the vfork path; where the assembly is
// missing (every architecture but amd64, e.g. arm64) it takes the staged
// one, which TestStagedLaunch runs here by turning this off.
var vforkLaunch = vfork.Available

// launchStaged starts stage init, which calls Enter.
func (h *Handle) launchStaged(req LaunchRequest) (*os.Process, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	defer devnull.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("isolate: config pipe: %w", err)
	}
	defer cfgR.Close()
	defer cfgW.Close()
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = devnull
	}
	if stderr == nil {
		stderr = devnull
	}
	attr := &os.ProcAttr{
		Env:   []string{StageEnv + "=" + StageInit},
		Files: []*os.File{devnull, stdout, stderr, cfgR, req.Stream},
		Sys:   h.SysProcAttr(),
	}
	if h.spec.Plan.CommandsCgroup {
		for _, cf := range commandsCgroupFiles {
			f, err := os.OpenFile(filepath.Join(h.cg.commands, cf.name), cf.flags, 0)
			if err != nil {
				return nil, fmt.Errorf("isolate: open the commands cgroup: %w", err)
			}
			defer f.Close()
			attr.Files = append(attr.Files, f)
		}
	}
	var proc *os.Process
	OnLauncherThread(func() { proc, err = os.StartProcess(req.Exe, req.Args, attr) })
	if err != nil {
		return nil, fmt.Errorf("isolate: start stage init (%s): %w", req.Exe, err)
	}
	cfgR.Close()
	if err := h.Started(proc.Pid); err != nil {
		proc.Kill()
		proc.Wait()
		return nil, err
	}
	if _, err := cfgW.Write(req.Config); err != nil {
		proc.Kill()
		proc.Wait()
		return nil, fmt.Errorf("isolate: send the configuration to stage init: %w", err)
	}
	return proc, nil
}

// launchForked runs the setup program in a vforked child (see program and
// buildLaunchPrefix).
//
// The child must be in the sandbox's cgroups before it does anything else.
// Writing a pid to a cgroup.procs file moves a whole thread group, which
// the kernel does under a global lock whose write side waits for an RCU
// grace period: 4–16 ms on this machine kind, measured, more than all the
// rest of the setup program together, and paid by every create. So the
// child is born in the cgroup v2 directory (clone3 with
// CLONE_INTO_CGROUP, which takes that lock only for reading), and joins
// the v1 hierarchies by writing "0" to their "tasks" files, which moves
// only the calling thread and needs no global lock (0.1 ms). The forked
// child is a thread group of one, so moving its thread moves all of it;
// the agent it becomes, and everything the agent starts, inherit its
// cgroups. Where the kernel lacks clone3 or CLONE_INTO_CGROUP (before
// 5.7, or a seccomp profile that refuses clone3), the child writes "0" to
// the v2 cgroup.procs instead and pays the grace period.
func (h *Handle) launchForked(req LaunchRequest) (*os.Process, error) {
	if h.cg != nil && h.cg.v2 != "" && cloneIntoCgroup.Load() {
		proc, err := h.launchForkedVia(req, true)
		var ce *cloneIntoCgroupError
		if !errors.As(err, &ce) {
			return proc, err
		}
		if ce.unsupported() {
			cloneIntoCgroup.Store(false)
		}
	}
	return h.launchForkedVia(req, false)
}

// cloneIntoCgroup is cleared once clone3 with CLONE_INTO_CGROUP has been
// refused as unsupported; launches then join the v2 cgroup by a write.
var cloneIntoCgroup atomic.Bool

func init() { cloneIntoCgroup.Store(true) }

// cloneIntoCgroupError is a refused clone3 with CLONE_INTO_CGROUP. No
// child exists: the launch is retried with clone and a write.
type cloneIntoCgroupError struct{ errno syscall.Errno }

func (e *cloneIntoCgroupError) Error() string {
	return "isolate: clone3 into the sandbox's cgroup: " + e.errno.Error()
}

// unsupported says the kernel (or a seccomp profile around the host) does
// not offer the call at all, so later launches need not try it.
func (e *cloneIntoCgroupError) unsupported() bool {
	switch e.errno {
	case syscall.ENOSYS, syscall.E2BIG, syscall.EINVAL, syscall.EPERM:
		return true
	}
	return false
}

// launchForkedVia is launchForked, starting the child with
// CLONE_INTO_CGROUP when into is set.
func (h *Handle) launchForkedVia(req LaunchRequest, into bool) (_ *os.Process, err error) {
	// Every descriptor the child moves into place is first copied to 10
	// or above, so that moving one to 0-4 cannot overwrite another.
	var childFDs []int
	defer func() {
		for _, fd := range childFDs {
			unix.Close(fd)
		}
	}()
	high := func(fd int, what string) (int, error) {
		n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
		if err != nil {
			return -1, fmt.Errorf("isolate: %s: %w", what, err)
		}
		childFDs = append(childFDs, n)
		return n, nil
	}
	// Files opened for the child only: raw descriptors, not os.Files,
	// which would register each cgroup file (pollable kernfs) with the
	// runtime's poller and take four more system calls apiece.
	openFD := func(path string, flags int, what string) (int, error) {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("isolate: %s: %w", what, err)
		}
		childFDs = append(childFDs, fd)
		return high(fd, what)
	}
	fileFD := func(f *os.File, what string) (int, error) {
		sc, err := f.SyscallConn()
		if err != nil {
			return -1, fmt.Errorf("isolate: %s: %w", what, err)
		}
		fd := -1
		var ferr error
		if err := sc.Control(func(raw uintptr) { fd, ferr = high(int(raw), what) }); err != nil {
			return -1, fmt.Errorf("isolate: %s: %w", what, err)
		}
		return fd, ferr
	}

	memfd, err := unix.MemfdCreate("sandboxkit-config", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("isolate: memfd_create: %w", err)
	}
	childFDs = append(childFDs, memfd)
	if _, err := unix.Write(memfd, req.Config); err != nil {
		return nil, fmt.Errorf("isolate: write the configuration: %w", err)
	}
	if _, err := unix.Seek(memfd, 0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	fds := stageFDs{stdin: -1, stdout: -1, stderr: -1, errW: -1}
	if fds.config, err = high(memfd, "config fd"); err != nil {
		return nil, err
	}
	if fds.stream, err = fileFD(req.Stream, "stream fd"); err != nil {
		return nil, err
	}
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	childFDs = append(childFDs, null)
	if fds.stdin, err = high(null, "stdin"); err != nil {
		return nil, err
	}
	fds.stdout, fds.stderr = fds.stdin, fds.stdin
	if req.Stdout != nil {
		if fds.stdout, err = fileFD(req.Stdout, "stdout"); err != nil {
			return nil, err
		}
	}
	if req.Stderr != nil {
		if fds.stderr, err = fileFD(req.Stderr, "stderr"); err != nil {
			return nil, err
		}
	}
	exe, err := unix.Open(req.Exe, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("isolate: open %s: %w", req.Exe, err)
	}
	childFDs = append(childFDs, exe)
	if fds.exe, err = high(exe, "exe"); err != nil {
		return nil, err
	}
	fds.commands = [2]int{-1, -1}
	if h.spec.Plan.CommandsCgroup {
		for i, cf := range commandsCgroupFiles {
			if fds.commands[i], err = openFD(filepath.Join(h.cg.commands, cf.name), cf.flags, "open the commands cgroup"); err != nil {
				return nil, err
			}
		}
	}
	var errP [2]int
	if err := unix.Pipe2(errP[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	childFDs = append(childFDs, errP[1])
	errR := errP[0]
	defer unix.Close(errR)
	if fds.errW, err = high(errP[1], "error pipe"); err != nil {
		return nil, err
	}
	intoFD := -1
	if h.cg != nil {
		for _, dir := range h.cg.all {
			if dir == h.cg.v2 && into {
				if intoFD, err = openFD(dir, unix.O_RDONLY|unix.O_DIRECTORY, "open the sandbox's cgroup"); err != nil {
					return nil, err
				}
				continue
			}
			// v1: the calling thread's "tasks" (see launchForked).
			name := "tasks"
			if dir == h.cg.v2 {
				name = "cgroup.procs"
			}
			fd, err := openFD(filepath.Join(dir, name), unix.O_WRONLY, "open the sandbox's cgroup")
			if err != nil {
				return nil, err
			}
			fds.cgroupProcs = append(fds.cgroupProcs, fd)
		}
	}
	fds.root = h.caps.Root
	// A network namespace made ahead of time, if one is ready (netns.go);
	// without one the child makes its own.
	if fds.root && h.spec.Tier == driver.TierNamespace && !h.spec.Network {
		if ns := takeSpareNetns(); ns >= 0 {
			childFDs = append(childFDs, ns)
			if fds.netns, err = high(ns, "network namespace fd"); err != nil {
				return nil, err
			}
		}
	}
	dumpable, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("isolate: PR_GET_DUMPABLE: %w", err)
	}
	fds.dumpable = dumpable

	p, err := buildProgram(&h.spec, fds, req.Args)
	if err != nil {
		return nil, err
	}
	if intoFD >= 0 {
		p.clone = cloneArgs{flags: unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_INTO_CGROUP,
			exitSignal: uint64(syscall.SIGCHLD), cgroup: uint64(intoFD)}
	}
	var pid uintptr
	var errno syscall.Errno
	OnLauncherThread(func() {
		if errno = p.blockSignals(); errno != 0 {
			return
		}
		pid, errno = vforkRun(p, uintptr(syscall.SIGCHLD))
		p.restoreSignals()
	})
	runtime.KeepAlive(p)
	if errno != 0 && intoFD >= 0 {
		return nil, &cloneIntoCgroupError{errno}
	}
	if errno != 0 {
		return nil, fmt.Errorf("isolate: clone: %w", errno)
	}
	// The child has exec'd the agent or failed: in the namespace tier it
	// was the intermediate process, which has exited, and the agent is
	// PID 1, its sibling.
	agent := int(pid)
	if h.spec.Tier == driver.TierNamespace {
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
		agent = int(p.pid1)
	}
	for _, fd := range childFDs {
		unix.Close(fd)
	}
	childFDs = nil
	var report [8]byte
	n, rerr := readFull(errR, report[:])
	var proc *os.Process
	if agent > 0 {
		proc, _ = os.FindProcess(agent) // never fails on Linux
	}
	fail := func(err error) (*os.Process, error) {
		if proc != nil {
			proc.Kill()
			proc.Wait()
		}
		return nil, err
	}
	switch {
	case n == 0 && rerr == nil && proc != nil:
		// EOF: the agent was exec'd.
	case n == len(report):
		i := binary.NativeEndian.Uint32(report[:4])
		e := syscall.Errno(binary.NativeEndian.Uint32(report[4:]))
		what := "setup step"
		if int(i) < len(p.ops) {
			what = p.ops[i].what
		}
		return fail(fmt.Errorf("isolate: %s: %w", what, e))
	default:
		return fail(fmt.Errorf("isolate: reading the setup's report: %d bytes, %v", n, rerr))
	}
	if err := h.adopt(agent); err != nil {
		return fail(err)
	}
	return proc, nil
}

// readFull reads until buf is full or EOF (err nil, n short).
func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, nil
		}
		n += m
	}
	return n, nil
}

// launcher is the thread every sandbox is started from.
var launcher struct {
	once sync.Once
	reqs chan func()
}

// OnLauncherThread runs f on one locked OS thread that lives as long as
// the process. A sandbox's first process must be started there: its
// parent-death signal fires when the *thread* that started it exits
// (docs/isolation.md, pitfall 8), and Go retires threads freely.
func OnLauncherThread(f func()) {
	launcher.once.Do(func() {
		launcher.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked
			for f := range launcher.reqs {
				f()
			}
		}()
	})
	done := make(chan struct{})
	launcher.reqs <- func() {
		defer close(done)
		f()
	}
	<-done
}
