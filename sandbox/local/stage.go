//go:build linux

package local

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/linuxrunner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/server"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local/isolate"
)

// stageEnv marks a re-executed copy of the current binary as one of the
// sandbox's own stages. It is the only variable such a process receives
// from the host; the commands the agent starts never see it.
const stageEnv = "SANDBOXKIT_STAGE"

// File descriptors handed to a stage process.
const (
	fdConfig = 3 // a pipe carrying the launch configuration (JSON), then EOF
	fdStream = 4 // the agent's stream (one end of a socketpair)
)

func init() {
	// This hook must run before anything else of the program does I/O:
	// this package does no I/O in init, and neither may its dependencies
	// (docs/isolation.md, pitfall 10). Binaries and TestMain functions can call
	// RunStage explicitly as well.
	RunStage()
}

// RunStage turns the process into a sandbox stage (the isolation setup or
// the in-sandbox agent) when it was started as one, and never returns in
// that case. In any other process it returns at once. It runs from this
// package's init function; call it first thing in main or TestMain too if
// your program does work in init functions of packages imported before
// this one.
func RunStage() {
	stage := os.Getenv(stageEnv)
	if stage == "" {
		return
	}
	// Setup steps are per-thread (namespaces, credentials, Landlock,
	// seccomp): keep them on the main thread that will exec the agent.
	runtime.LockOSThread()
	// Commands run as the agent's uid. A dumpable agent would let them
	// open its pipes through /proc/PID/fd (and write into a command's
	// output or the exec status of the next start) or its memory through
	// /proc/PID/mem; undumpable, that takes CAP_SYS_PTRACE, which nothing
	// inside has. (Each exec resets the flag, so every stage sets it.)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	code := runStage(stage)
	os.Exit(code)
}

func runStage(stage string) int {
	var commands *isolate.CommandsCgroup
	if stage == "agent" {
		commands = isolate.TakeCommandsCgroup()
	}
	cfgFile := os.NewFile(fdConfig, "sandboxkit-config")
	// Non-blocking, so the stream is served by the runtime's poller instead
	// of a thread parked in read(2).
	_ = syscall.SetNonblock(fdStream, true)
	conn := os.NewFile(fdStream, "sandboxkit-stream")
	if cfgFile == nil || conn == nil {
		fmt.Fprintln(os.Stderr, "sandboxkit: stage started without its file descriptors")
		return 2
	}
	raw, err := io.ReadAll(cfgFile)
	cfgFile.Close()
	if err != nil {
		return failStage(conn, "reading the launch configuration", err)
	}
	var cfg launchConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return failStage(conn, "decoding the launch configuration", err)
	}
	var processesReady <-chan struct{}
	var cgroup *linuxrunner.Cgroup
	switch stage {
	case "init":
		if cfg.Isolated {
			if err := enterIsolation(cfg, raw); err != nil {
				return failStage(conn, "setting up isolation", err)
			}
			// enterIsolation execs the agent stage and does not return on success.
			return 1
		}
		if err := processTierRlimits(cfg.Limits); err != nil {
			return failStage(conn, "applying the limits", err)
		}
		if err := closeInheritedOnExec(fdStream + 1); err != nil {
			return failStage(conn, "closing inherited descriptors", err)
		}
	case "agent":
		if processesReady, cgroup, err = completeIsolation(cfg, commands); err != nil {
			return failStage(conn, "completing isolation", err)
		}
	default:
		return failStage(conn, "starting", fmt.Errorf("unknown stage %q", stage))
	}
	// Nothing of the host's environment is needed from here on.
	os.Clearenv()
	// The stream must not leak into the commands the agent starts: a
	// command holding it could forge frames to the host, and would keep
	// the stream open after the agent died (the host would never see EOF).
	syscall.CloseOnExec(fdStream)
	// Serve on a fresh goroutine: this one runs inside an init function,
	// which the runtime keeps locked to the main thread until init ends
	// (never, here), and a locked goroutine costs an extra thread hand-off
	// on every wake-up of the agent's read loop.
	runtime.UnlockOSThread()
	// One P: the agent waits far more than it computes (server.NarrowProcs).
	// Not before the thread warm-up ends: with one P its threads are made
	// one after the other, each waiting for the previous one to block.
	go func() {
		if processesReady != nil {
			<-processesReady
		}
		server.NarrowProcs()
	}()
	scratch := "" // the landlock tier's private TMPDIR: its /tmp is the host's, read-only
	if cfg.Iso.Plan != nil {
		scratch = cfg.Iso.Plan.TmpDir
	}
	served := make(chan error, 1)
	go func() {
		// ServeProcess hardens the agent (undumpable again after the exec,
		// no environment) before it reads a frame.
		served <- server.ServeProcess(newStream(conn), server.ServeOptions{ProcessesReady: processesReady, Runner: linuxrunner.New(linuxrunner.Options{Cgroup: cgroup}), ScratchDir: scratch, Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "sandboxkit agent: "+format+"\n", args...)
		}})
	}()
	err = <-served
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxkit agent: %v\n", err)
		return 1
	}
	return 0
}

// failStage answers the host's handshake with an error it can report, so
// that sandbox creation fails with the reason instead of a closed stream.
func failStage(conn *os.File, what string, err error) int {
	msg, _ := json.Marshal(wire.Reply{Error: &wire.WireError{Code: driver.CodeIsolationUnavailable, Message: fmt.Sprintf("sandbox %s failed: %v", what, err)}})
	// Consume the hello frame first so the host is not blocked writing it.
	_, _ = wire.ReadFrame(conn)
	_ = wire.WriteFrame(conn, 0, wire.FrameHelloOK, msg)
	conn.Close()
	return 1
}

// closeInheritedOnExec marks every descriptor from first on close-on-exec,
// on the process tier's agent: nothing else stands between the host
// program's descriptors and the commands there. Go opens its own files
// close-on-exec, but a host program inherits whatever its parent left
// without the flag (found on a CI machine: a /dev/null at 10 and a pipe to
// the job runner at 251), os/exec passes those on to the agent, and the
// agent passed them to every command. The other tiers' launcher closes
// them before the boundary.
func closeInheritedOnExec(first int) error {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Before Linux 5.11 (or under a filter that refuses close_range): one
	// descriptor at a time.
	ents, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return fmt.Errorf("close_range: %v; listing /proc/self/fd: %w", err, rerr)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd) // the listing's own descriptor is closed already or gone: harmless
		}
	}
	return nil
}

// processTierRlimits sets, on the process tier's agent before it serves,
// the rlimits every command inherits: RLIMIT_FSIZE and RLIMIT_NOFILE, soft
// and hard alike so a command cannot raise them. The agent used to set
// them on each command after it started, and a command that wrote 5000
// bytes at once finished before its RLIMIT_FSIZE of 1000 landed (seen in
// the contract suite). The agent's budget of descriptors is computed from
// RLIMIT_NOFILE when it starts serving, after this.
func processTierRlimits(l driver.Limits) error {
	set := func(name string, res int, v int64) error {
		if v <= 0 {
			return nil
		}
		lim := unix.Rlimit{Cur: uint64(v), Max: uint64(v)}
		if err := unix.Setrlimit(res, &lim); err != nil {
			return fmt.Errorf("%s=%d: %w", name, v, err)
		}
		return nil
	}
	if err := set("RLIMIT_FSIZE", unix.RLIMIT_FSIZE, l.FileSizeBytes); err != nil {
		return err
	}
	return set("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, int64(l.OpenFiles))
}
