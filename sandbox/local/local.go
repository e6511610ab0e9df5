//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/linuxrunner"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local/isolate"
)

// launchConfig is what the host hands a stage on fd 3.
type launchConfig struct {
	ID       string      `json:"id"`
	Tier     driver.Tier `json:"tier"`
	Isolated bool        `json:"isolated"`
	Iso      isoSpec     `json:"iso,omitempty"`
	// Limits are the process tier's: its stage sets the rlimits that every
	// command inherits on itself before it serves (processTierRlimits).
	Limits driver.Limits `json:"limits,omitempty"`
}

// Start creates a sandbox on this machine at the best tier available that
// the caller accepts.
func (d *Driver) Start(ctx context.Context, cfg driver.Config) (driver.Instance, error) {
	ws := cfg.Workspace
	temp := false
	var err error
	if ws == "" {
		ws, err = newTempWorkspace()
		if err != nil {
			return nil, driver.Errorf(driver.CodeBackend, err, "cannot create a temporary workspace")
		}
		temp = true
	} else {
		fi, err := os.Stat(ws)
		if err != nil || !fi.IsDir() {
			return nil, driver.Errorf(driver.CodeInvalidArgument, err, fmt.Sprintf("workspace %q is not an existing directory", ws))
		}
	}
	cfg.Workspace = ws
	tier, iso, err := chooseTier(cfg, d.tier, temp)
	if err != nil {
		if temp {
			os.RemoveAll(ws)
		}
		return nil, err
	}
	inst, err := d.launch(ctx, cfg, tier, iso, ws)
	if err != nil {
		if temp {
			os.RemoveAll(ws)
		}
		return nil, err
	}
	inst.tempWorkspace = temp
	return inst, nil
}

// chooseTier picks the strongest tier this machine provides and checks it
// against what the caller accepts.
func chooseTier(cfg driver.Config, exact driver.Tier, disposable bool) (driver.Tier, *isoHost, error) {
	if exact != driver.TierNone {
		return exactTier(cfg, exact, disposable)
	}
	best, iso, why := bestTier(cfg, disposable)
	allowed := func(t driver.Tier) bool {
		return t >= driver.TierNamespace || slices.Contains(cfg.AllowWeaker, t)
	}
	for _, t := range []driver.Tier{best, driver.TierLandlock, driver.TierProcess} {
		if t > best || !allowed(t) {
			continue
		}
		if t < cfg.MinTier {
			break
		}
		if t != best {
			if iso != nil {
				iso.cleanup()
			}
			iso = nil
			if t == driver.TierLandlock {
				var err error
				iso, err = prepareIsolation(cfg, t, disposable)
				if err != nil {
					continue
				}
			}
		}
		return t, iso, nil
	}
	if iso != nil {
		iso.cleanup()
	}
	msg := fmt.Sprintf("the local backend cannot provide the isolation asked for (minimum %s): the best this machine offers is %s", cfg.MinTier, best)
	if why != "" {
		msg += " (" + why + ")"
	}
	if best < driver.TierNamespace && !slices.Contains(cfg.AllowWeaker, best) {
		msg += fmt.Sprintf("; to accept it, allow the %q tier by name (sandbox.AllowWeaker)", best)
	}
	msg += "; run `sandboxkit doctor` to see what is missing"
	return 0, nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, msg)
}

// exactTier builds the tier WithTier asked for, or explains why not.
func exactTier(cfg driver.Config, t driver.Tier, disposable bool) (driver.Tier, *isoHost, error) {
	fail := func(why string) (driver.Tier, *isoHost, error) {
		return 0, nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf("the local backend cannot build the %s tier it was told to use: %s; run `sandboxkit doctor` to see what is missing", t, why))
	}
	if t < cfg.MinTier {
		return fail(fmt.Sprintf("the caller requires at least %s", cfg.MinTier))
	}
	if t < driver.TierNamespace && !slices.Contains(cfg.AllowWeaker, t) {
		return fail(fmt.Sprintf("allow the %q tier by name (sandbox.AllowWeaker)", t))
	}
	switch t {
	case driver.TierProcess:
		return t, nil, nil
	case driver.TierLandlock, driver.TierNamespace:
		if err := isolateProbe().Can(t); err != nil {
			return fail(err.Error())
		}
		iso, err := prepareIsolation(cfg, t, disposable)
		if err != nil {
			return fail(err.Error())
		}
		return t, iso, nil
	}
	return fail("the local backend has no such tier")
}

// instance is one running local sandbox.
type instance struct {
	cfg           driver.Config
	tier          driver.Tier
	iso           *isoHost
	proc          *os.Process
	conn          *os.File
	stream        io.ReadWriteCloser // conn, read and written raw (stream.go)
	pid           int
	workspace     string
	tempWorkspace bool
	done          chan struct{}
	waitErr       error
	closeOnce     sync.Once
	closeErr      error
	paused        bool
	mu            sync.Mutex
}

func (d *Driver) launch(ctx context.Context, cfg driver.Config, tier driver.Tier, iso *isoHost, ws string) (*instance, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, driver.Errorf(driver.CodeBackend, err, "cannot create the agent's socketpair")
	}
	// Non-blocking, so that the runtime poller can interrupt a pending
	// read when the sandbox closes.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, driver.Errorf(driver.CodeBackend, err, "cannot set up the agent's socketpair")
	}
	hostEnd := os.NewFile(uintptr(fds[0]), "sandboxkit-agent")
	childEnd := os.NewFile(uintptr(fds[1]), "sandboxkit-agent-child")
	defer childEnd.Close()
	lc := launchConfig{ID: cfg.ID, Tier: tier}
	if iso != nil {
		lc.Isolated = true
		lc.Iso = iso.spec(ws)
	} else {
		lc.Limits = cfg.Limits
	}
	b, _ := json.Marshal(lc)
	var proc *os.Process
	if iso != nil {
		proc, err = iso.h.Launch(isolate.LaunchRequest{Exe: d.exe, Args: []string{"sandboxkit-agent", cfg.ID}, Config: b, Stream: childEnd, Stderr: os.Stderr})
		if err != nil {
			hostEnd.Close()
			iso.cleanup()
			return nil, driver.Errorf(driver.CodeIsolationUnavailable, err, "cannot start the sandbox (re-exec of "+d.exe+")")
		}
	} else if proc, err = startProcessTier(d.exe, cfg.ID, b, childEnd); err != nil {
		hostEnd.Close()
		return nil, driver.Errorf(driver.CodeBackend, err, "cannot start the sandbox agent (re-exec of "+d.exe+")")
	}
	inst := &instance{cfg: cfg, tier: tier, iso: iso, proc: proc, conn: hostEnd, stream: newStream(hostEnd), pid: proc.Pid, workspace: ws, done: make(chan struct{})}
	go func() {
		st, err := proc.Wait()
		if err == nil && !st.Success() {
			err = errors.New(st.String())
		}
		inst.waitErr = err
		close(inst.done)
	}()
	return inst, nil
}

// startProcessTier starts the process tier's agent: the binary as stage
// init, which serves the agent protocol itself. Its parent-death signal
// fires when the thread that started it exits, so it is started from the
// launcher thread.
func startProcessTier(exe, id string, cfg []byte, stream *os.File) (*os.Process, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	attr := &os.ProcAttr{
		Env:   []string{stageEnv + "=init"},
		Files: []*os.File{devnull, devnull, os.Stderr, cfgR, stream},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true},
	}
	var proc *os.Process
	isolate.OnLauncherThread(func() { proc, err = os.StartProcess(exe, []string{"sandboxkit-agent", id}, attr) })
	if err != nil {
		return nil, err
	}
	cfgR.Close()
	if _, err := cfgW.Write(cfg); err != nil {
		proc.Kill()
		proc.Wait()
		return nil, fmt.Errorf("cannot send the launch configuration to the agent: %w", err)
	}
	return proc, nil
}

func (i *instance) Conn() io.ReadWriteCloser { return i.stream }

func (i *instance) Done() <-chan struct{} { return i.done }

func (i *instance) Isolation() driver.Isolation {
	if i.iso != nil {
		iso := i.iso.report(i.workspace)
		if iso.Extra == nil {
			iso.Extra = map[string]string{}
		}
		iso.Extra["agent_pid"] = fmt.Sprint(i.pid)
		if i.tier == driver.TierLandlock {
			iso.Extra["tmpdir"] = i.iso.tmpDir()
		}
		return iso
	}
	iso := processIsolation(i.cfg, i.workspace)
	// The agent's host pid, for tools (and the contract suite) that watch
	// or kill it from outside.
	iso.Extra["agent_pid"] = fmt.Sprint(i.pid)
	return iso
}

// processIsolation reports the process tier honestly: what it does and,
// above all, what it does not.
func processIsolation(cfg driver.Config, ws string) driver.Isolation {
	lim := cfg.Limits
	ctl := func(name string, on bool, how string) driver.Control {
		return driver.Control{Name: name, Enforced: on, Mechanism: how}
	}
	// The process tier's stage sets RLIMIT_FSIZE and RLIMIT_NOFILE on the
	// agent, and every command inherits them (processTierRlimits); CPU
	// time and RLIMIT_AS cannot bind the agent, which would use up the one
	// and cannot run under the other, so the agent sets them on each
	// command it starts (package sandbox asks it to).
	rlimit := func(name string, on bool, how string, r driver.Rlimit, byAgent bool) driver.Control {
		c := driver.Control{Name: name, Enforced: on, Mechanism: rlimitHow(on, how)}
		if on {
			c.Rlimit, c.SetByAgent = r, byAgent
		}
		return c
	}
	controls := []driver.Control{
		ctl("network", false, "not enforced: the process tier shares the host's network"),
		ctl("filesystem", false, "file API confined to the workspace by os.Root in the agent; commands are NOT confined and can read and write anything the host user can"),
		ctl("environment", true, "minimal environment; the host's variables are not passed"),
		ctl("processes_visible", false, "host processes are visible and signalable"),
		rlimit("cpu", lim.CPUSeconds > 0, "RLIMIT_CPU per process, set by the agent on each command", driver.RlimitCPU, true),
		// RLIMIT_AS breaks runtimes that reserve address space (Go, JVM,
		// V8), so it is the fallback only for a memory limit set by name.
		rlimit("memory", cfg.Explicit.MemoryBytes > 0, "RLIMIT_AS per process, set by the agent on each command (fallback: breaks runtimes that reserve address space)", driver.RlimitAS, true),
		ctl("pids", false, "not enforced in the process tier"),
		rlimit("file_size", lim.FileSizeBytes > 0, "RLIMIT_FSIZE on the agent, inherited by every command, and the agent's file API", driver.RlimitFSIZE, false),
		rlimit("open_files", lim.OpenFiles > 0, "RLIMIT_NOFILE on the agent, inherited by every command", driver.RlimitNOFILE, false),
		ctl("disk", lim.DiskBytes > 0, rlimitHow(lim.DiskBytes > 0, "agent file API only; commands are not limited")),
		ctl("timeout", true, "agent kills the process tree at the deadline"),
	}
	if cfg.Network {
		controls[0].Mechanism = "network allowed: the host's network is shared"
	}
	return driver.Isolation{
		Tier:          driver.TierProcess,
		Controls:      controls,
		Gaps:          []string{"commands can read and write outside the workspace", "no network isolation", "host processes visible", "no pids or memory cgroup"},
		WorkspacePath: ws,
		HostWorkspace: ws,
		Extra:         map[string]string{},
	}
}

func rlimitHow(on bool, how string) string {
	if on {
		return how
	}
	return "no limit set"
}

func (i *instance) Pause(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.iso != nil {
		if err := i.iso.freeze(); err == nil {
			i.paused = true
			return nil
		} else if !errors.Is(err, errNoFreezer) {
			return err
		}
	}
	// No freezer: stop every process below the agent. The agent itself
	// keeps serving; package sandbox refuses calls while paused.
	linuxrunner.StopDescendants(i.pid)
	i.paused = true
	return nil
}

func (i *instance) Resume(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.iso != nil {
		if err := i.iso.thaw(); err == nil {
			i.paused = false
			return nil
		} else if !errors.Is(err, errNoFreezer) {
			return err
		}
	}
	for _, pid := range linuxrunner.Descendants(i.pid) {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	i.paused = false
	return nil
}

// Close ends the agent (which kills everything it started), makes sure of
// it, and removes a temporary workspace.
func (i *instance) Close(ctx context.Context) error {
	i.closeOnce.Do(func() {
		i.mu.Lock()
		if i.paused {
			i.mu.Unlock()
			_ = i.Resume(ctx)
		} else {
			i.mu.Unlock()
		}
		if i.iso != nil && !i.tempWorkspace {
			// A quota'd workspace lives in a tmpfs inside the sandbox:
			// give a kept workspace's data back before it is torn down.
			if err := i.iso.save(); err != nil {
				i.closeErr = err
			}
		}
		// The stream holds the socket (stream.go takes it out of the
		// runtime's poller with a descriptor of its own); conn is the
		// original descriptor.
		i.stream.Close()
		i.conn.Close()
		// The agent ends itself when its stream closes; a stopped one
		// (SIGSTOP) cannot, so waiting for it only made Close, and a
		// Pool.Get that closes it, take the whole grace period (found in
		// review: 3 s).
		if _, stopped := procStatus(i.pid); !stopped {
			select {
			case <-i.done:
			case <-time.After(3 * time.Second):
			}
		}
		// Whatever the agent left behind (or all of it, if the agent was
		// stuck) is killed from here.
		if i.iso != nil {
			i.iso.killAll()
		}
		// The other tiers' processes can outlive the agent (no PID
		// namespace holds them): find what is left by walking /proc. In
		// the namespace tier none can: every process of the sandbox is in
		// its PID namespace, which the kernel empties when PID 1 (the
		// agent) dies, before the agent's exit is reported (<-i.done
		// below). The walk reads every host process's stat file — ~1,000
		// system calls and most of Close's CPU time on a busy host.
		for range 20 {
			if i.tier == driver.TierNamespace {
				break
			}
			ds := linuxrunner.Descendants(i.pid)
			if len(ds) == 0 {
				break
			}
			for _, pid := range ds {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = i.proc.Kill()
		<-i.done
		if i.iso != nil {
			i.iso.cleanup()
		}
		if i.tempWorkspace {
			if err := os.RemoveAll(i.workspace); err != nil {
				i.closeErr = err
			}
		}
	})
	return i.closeErr
}
