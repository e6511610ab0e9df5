//go:build linux

package isolate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// The tests drive the real launch path without the lead's agent: the test
// binary re-executes itself as stage init (TestMain calls Enter), Enter
// execs it again as stage agent, and the stage-agent TestMain runs the
// test's probe (a shell command, or a Go function for raw syscalls) as the
// child of a tiny reaping PID 1 and exits with its status.

// testConfig is what the tests send on fd 3.
type testConfig struct {
	Spec  Spec
	Probe string
}

// helperEnv makes the test binary a host process that starts one sandbox
// and waits to be killed (the SIGKILL lifetime test).
const helperEnv = "SANDBOXKIT_ISOLATE_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(StageEnv) {
	case StageInit:
		runtime.LockOSThread()
		var cfg testConfig
		raw := readConfig(&cfg)
		err := Enter(cfg.Spec, raw)
		fmt.Fprintln(os.Stderr, "enter:", err)
		os.Exit(100)
	case StageAgent:
		commands = TakeCommandsCgroup()
		var cfg testConfig
		readConfig(&cfg)
		os.Exit(agentStage(cfg))
	}
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/sandboxkit/sandboxkit/sandbox/local/isolate.OnLauncherThread.func1.1"))
}

func readConfig(cfg *testConfig) []byte {
	f := os.NewFile(ConfigFD, "config")
	raw, err := io.ReadAll(f)
	f.Close()
	if err == nil {
		err = json.Unmarshal(raw, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		os.Exit(102)
	}
	return raw
}

// commands is the stage agent's commands cgroup (taken first thing in
// TestMain, as the real agent does).
var commands *CommandsCgroup

// agentStage stands in for the agent: Complete, then the probe as the
// only child of this PID 1, which reaps every orphan until the probe ends.
func agentStage(cfg testConfig) int {
	if err := Complete(cfg.Spec); err != nil {
		fmt.Fprintln(os.Stderr, "complete:", err)
		return 101
	}
	if name, ok := strings.CutPrefix(cfg.Probe, "go:"); ok {
		return goProbes[name](cfg)
	}
	dir := WorkspaceInside
	tmp := "/tmp"
	if cfg.Spec.Tier == driver.TierLandlock {
		dir, tmp = cfg.Spec.HostWorkspace, cfg.Spec.Plan.TmpDir
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + tmp, "HOME=" + dir, "LANG=C"}
	argv := WrapCommand(cfg.Spec, []string{"/bin/sh", "-c", cfg.Probe})
	if err := commands.Check(cfg.Spec); err != nil {
		fmt.Fprintln(os.Stderr, "commands cgroup:", err)
		return 101
	}
	// syscall.ForkExec runs nothing of ours in the child: start it from
	// the thread in the commands cgroup.
	spawn := func(f func() error) error { return f() }
	if commands != nil {
		spawn = commands.Spawn
	}
	var pid int
	err := spawn(func() (err error) {
		pid, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
			Dir: dir, Env: env, Files: []uintptr{0, 1, 2}})
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start probe:", err)
		return 103
	}
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 104
		}
		if wpid == pid {
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
}

// goProbes run in the stage-agent process itself, for checks a shell
// cannot make.
var goProbes = map[string]func(testConfig) int{
	"exit": func(testConfig) int { return 0 },
	"syscalls": func(testConfig) int {
		// Each must fail with the errno given; the arguments would
		// succeed for a process with capabilities.
		type call struct {
			name string
			nr   uintptr
			args [6]uintptr
		}
		tmp, _ := unix.BytePtrFromString("/tmp")
		tmpfs, _ := unix.BytePtrFromString("tmpfs")
		calls := []call{
			{"mount", unix.SYS_MOUNT, [6]uintptr{ptr(tmpfs), ptr(tmp), ptr(tmpfs), 0, 0}},
			{"umount2", unix.SYS_UMOUNT2, [6]uintptr{ptr(tmp), unix.MNT_DETACH}},
			{"unshare", unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWUSER}},
			{"setns", unix.SYS_SETNS, [6]uintptr{0, 0}},
			{"ptrace", unix.SYS_PTRACE, [6]uintptr{unix.PTRACE_TRACEME}},
			{"bpf", unix.SYS_BPF, [6]uintptr{0, 0, 0}},
			{"keyctl", unix.SYS_KEYCTL, [6]uintptr{0, 0}},
			{"userfaultfd", unix.SYS_USERFAULTFD, [6]uintptr{0}},
			{"io_uring_setup", unix.SYS_IO_URING_SETUP, [6]uintptr{1, 0}},
			{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [6]uintptr{0}},
			{"clone_newns", unix.SYS_CLONE, [6]uintptr{unix.CLONE_NEWNS | uintptr(unix.SIGCHLD)}},
			{"clone3", unix.SYS_CLONE3, [6]uintptr{0, 0}},
			{"chroot", unix.SYS_CHROOT, [6]uintptr{ptr(tmp)}},
			{"open_tree", unix.SYS_OPEN_TREE, [6]uintptr{atFDCWD, ptr(tmp), unix.OPEN_TREE_CLONE}},
		}
		for _, c := range calls {
			_, _, e := unix.RawSyscall6(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5])
			fmt.Printf("%s %s\n", c.name, errName(e))
		}
		runtime.KeepAlive(tmp)
		runtime.KeepAlive(tmpfs)
		return 0
	},
}

// ptr passes a NUL-terminated string to a raw syscall; the strings are
// kept alive by runtime.KeepAlive after the calls.
func ptr(b *byte) uintptr { return uintptr(unsafe.Pointer(b)) }

func errName(e syscall.Errno) string {
	if e == 0 {
		return "OK"
	}
	return unix.ErrnoName(e)
}

var idSeq atomic.Int64

// newSpec is a namespace-tier spec with a fresh workspace the sandbox uid
// can reach (t.TempDir's parent is 0700, which Prepare refuses as root).
func newSpec(t testing.TB, tier driver.Tier) Spec {
	t.Helper()
	ws, err := os.MkdirTemp("", "isolate-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	return Spec{Tier: tier, ID: fmt.Sprintf("t%d-%d", os.Getpid(), idSeq.Add(1)), HostWorkspace: ws}
}

// box is one running test sandbox.
type box struct {
	h      *Handle
	proc   *os.Process
	stdout *bufio.Reader
	stderr lockedBuffer
	errs   chan struct{} // closed when stderr has been copied to its end
	outBuf bytes.Buffer
	waited bool
	code   int
}

// lockedBuffer collects the sandbox's stderr while tests read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func requireTier(t testing.TB, tier driver.Tier) {
	t.Helper()
	if err := Probe().Can(tier); err != nil {
		// CI names the tiers its machine must provide: there, a missing
		// tier fails instead of skipping the tests that prove it.
		for _, r := range strings.Split(os.Getenv("SANDBOXKIT_REQUIRE"), ",") {
			if strings.TrimSpace(r) == tier.String() {
				t.Fatalf("SANDBOXKIT_REQUIRE=%s but tier %s is unavailable here: %v", os.Getenv("SANDBOXKIT_REQUIRE"), tier, err)
			}
		}
		t.Skipf("tier %s unavailable here: %v", tier, err)
	}
}

// start launches spec with the probe the way the local backend does
// (Handle.Launch).
func start(t testing.TB, spec Spec, probe string) *box {
	t.Helper()
	h, err := Prepare(spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	b := &box{h: h, errs: make(chan struct{})}
	t.Cleanup(func() { b.close(t) })
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, childEnd := os.NewFile(uintptr(pair[0]), "host"), os.NewFile(uintptr(pair[1]), "child")
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		io.Copy(&b.stderr, errR)
		errR.Close()
		close(b.errs)
	}()
	raw, _ := json.Marshal(testConfig{Spec: h.Spec(), Probe: probe})
	proc, err := h.Launch(LaunchRequest{Config: raw, Stream: childEnd, Stdout: outW, Stderr: errW})
	childEnd.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	b.proc = proc
	t.Cleanup(func() { hostEnd.Close() })
	b.stdout = bufio.NewReader(outR)
	t.Cleanup(func() { outR.Close() })
	return b
}

// line reads one line of the probe's stdout.
func (b *box) line(t testing.TB) string {
	t.Helper()
	l, err := b.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading probe output: %v (stderr: %s)", err, b.stderr.String())
	}
	b.outBuf.WriteString(l)
	return strings.TrimSuffix(l, "\n")
}

// wait returns the probe's remaining stdout and its exit code.
func (b *box) wait(t testing.TB) (string, int) {
	t.Helper()
	rest, _ := io.ReadAll(b.stdout)
	b.outBuf.Write(rest)
	st, err := b.proc.Wait()
	b.waited = true
	if err != nil {
		t.Fatal(err)
	}
	<-b.errs
	b.code = st.ExitCode()
	if ws := st.Sys().(syscall.WaitStatus); ws.Signaled() {
		b.code = 128 + int(ws.Signal())
	}
	if b.code >= 100 && b.code < 110 {
		t.Fatalf("sandbox setup failed (exit %d): %s", b.code, b.stderr.String())
	}
	return b.outBuf.String(), b.code
}

func (b *box) close(t testing.TB) {
	if b.h == nil {
		return
	}
	b.h.KillAll()
	if b.proc != nil && !b.waited {
		b.proc.Wait()
		b.waited = true
	}
	if b.proc != nil {
		<-b.errs
	}
	if err := b.h.Cleanup(); err != nil {
		t.Errorf("Cleanup: %v", err)
	}
	b.h = nil
}

// run is start + wait.
func run(t testing.TB, spec Spec, probe string) (string, int) {
	t.Helper()
	b := start(t, spec, probe)
	return b.wait(t)
}

// helperMain starts a sandbox whose processes try to outlive it (a
// setsid daemon, a background child), prints the sandbox init's pid and
// blocks until killed.
func helperMain() int {
	ws := os.Getenv(helperEnv)
	spec := Spec{Tier: driver.TierNamespace, ID: fmt.Sprintf("helper%d", os.Getpid()), HostWorkspace: ws}
	if os.Getenv("SANDBOXKIT_ISOLATE_HELPER_TIER") == "landlock" {
		spec.Tier = driver.TierLandlock
	}
	t := &helperT{}
	b := start(t, spec, "setsid sleep 1000 & sleep 1000 & echo ready; sleep 1000")
	if t.failed {
		return 1
	}
	if b.line(t) != "ready" {
		return 1
	}
	fmt.Printf("%d\n", b.proc.Pid)
	time.Sleep(time.Hour)
	return 0
}

// helperT is just enough of testing.TB for start outside a test.
type helperT struct {
	testing.TB
	failed bool
}

func (h *helperT) Helper()                   {}
func (h *helperT) Cleanup(func())            {}
func (h *helperT) Fatal(a ...any)            { fmt.Fprintln(os.Stderr, a...); os.Exit(1) }
func (h *helperT) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(1) }
func (h *helperT) Errorf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }

// hostFile creates a file on the host that probes try to change.
func hostFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var fdcwd = unix.AT_FDCWD

// atFDCWD is AT_FDCWD as a raw syscall argument.
var atFDCWD = uintptr(fdcwd)

type helperProc struct {
	cmd     *exec.Cmd
	initPid int
	nsLink  string
}

// execHelper starts the helper host process and waits until its sandbox
// runs.
func execHelper(t *testing.T, ws, tier string) helperProc {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+ws, "SANDBOXKIT_ISOLATE_HELPER_TIER="+tier)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v: %s", err, stderr.String())
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		t.Fatal(err)
	}
	return helperProc{cmd: cmd, initPid: pid, nsLink: link}
}
