package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/server"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// A runtime other than runc is measured before it is trusted: the first
// Start on it runs a probe sandbox with the same configuration and checks,
// with cheap versions of the escape suite's probes, that each control the
// backend reports really holds there. gVisor's runsc taught this: with
// Debian's runsc the contract and escape suites went 65 pass / 15 fail
// while Info claimed the gvisor tier (ptrace and io_uring allowed although
// the seccomp allowlist was reported, an RLIMIT_CPU of 1 s let a spin run
// 8 s, the file API followed a symlink out of the workspace, hitting the
// pids or memory limit killed the whole sandbox, timeouts left processes
// running). A runtime that fails a probe is refused with
// ISOLATION_UNAVAILABLE naming the probe; one that passes them all reports
// its tier, and Info says it was measured (Extra["runtime_check"]).

// runtimeCheck is the measurement of one runtime, made once per Driver.
type runtimeCheck struct {
	once   sync.Once
	err    error  // nil when every probe held
	report string // what was measured, for Info
}

// needsMeasuring says whether a sandbox on runtime must be measured first:
// every runtime but the engine's reference one, runc, on which the suites
// run in CI.
func needsMeasuring(runtime string) bool { return runtime != "" && runtime != "runc" }

// checkRuntime measures p's runtime once per Driver and returns the
// verdict (nil, or an ISOLATION_UNAVAILABLE error naming the failed probe)
// and the report for Info.
func (d *Driver) checkRuntime(ctx context.Context, p *plan, f *engineFacts, imageID string, ag *agentBin, vol string) (string, error) {
	d.mu.Lock()
	if d.checks == nil {
		d.checks = map[string]*runtimeCheck{}
	}
	key := p.runtime + "\x00" + p.image
	c := d.checks[key]
	if c == nil {
		c = &runtimeCheck{}
		d.checks[key] = c
	}
	d.mu.Unlock()
	c.once.Do(func() {
		// The verdict is shared by every later Start: one caller's
		// cancellation must not decide it.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		start := time.Now()
		failed, err := d.measure(mctx, p, f, imageID, ag, vol)
		switch {
		case err != nil:
			// The probe sandbox itself failed: no verdict, try again
			// at the next Start.
			c.err = err
			d.mu.Lock()
			delete(d.checks, key)
			d.mu.Unlock()
		case failed != "":
			c.err = driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
				"the Docker runtime %q failed the creation-time check, probe %s; its sandboxes would not hold what they report, so none is made: use the default runtime (runc, the container tier) or a runtime that passes every probe (see the README on gVisor)",
				p.runtime, failed))
		default:
			c.report = fmt.Sprintf("measured at first use in %d ms: %s held", time.Since(start).Milliseconds(), strings.Join(probeNames, ", "))
		}
	})
	return c.report, c.err
}

// probeNames are the controls measured, in order.
var probeNames = []string{"syscalls", "filesystem", "cpu", "timeouts", "pids", "memory"}

// measure starts probe sandboxes like p's and runs the probes; failed
// names the first control that did not hold ("" when all did), err a
// failure to measure at all. The pids and memory limits get a probe
// sandbox each, so that a runtime whose whole sandbox dies at one of them
// (as gVisor's does: its kernel's threads count against the pids limit)
// is caught by that probe and does not hide the others.
func (d *Driver) measure(ctx context.Context, p *plan, f *engineFacts, imageID string, ag *agentBin, vol string) (failed string, err error) {
	steps := []struct {
		start  string // the control named when the probe sandbox cannot start
		limits driver.Limits
		probes []string
	}{
		{"agent start", driver.Limits{CPUSeconds: 1}, []string{"syscalls", "filesystem", "cpu", "timeouts"}},
		{"pids", driver.Limits{Pids: 16}, []string{"pids"}},
		{"memory", driver.Limits{MemoryBytes: 128 << 20}, []string{"memory"}},
	}
	for _, step := range steps {
		failed, err := d.measureStep(ctx, p, f, imageID, ag, vol, step.start, step.limits, step.probes)
		if failed != "" || err != nil {
			return failed, err
		}
	}
	return "", nil
}

func (d *Driver) measureStep(ctx context.Context, p *plan, f *engineFacts, imageID string, ag *agentBin, vol string, start string, limits driver.Limits, probes []string) (failed string, err error) {
	pp := *p
	pp.cfg.ID = "probe-" + randHex(6)
	pp.name = "sandboxkit-" + pp.cfg.ID
	pp.cfg.Owner = "sandboxkit-runtime-probe"
	pp.cfg.Workspace = ""
	pp.cfg.Network = false
	pp.cfg.Limits = limits
	c, err := d.launch(ctx, &pp, f, imageID, ag, vol)
	if err != nil {
		return "", err
	}
	defer c.Close(context.WithoutCancel(ctx))
	hello := wire.Hello{
		Workspace: workspacePath,
		Env:       []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + workspacePath},
	}
	if limits.CPUSeconds > 0 {
		hello.Rlimits = []wire.Rlimit{{Resource: 0, Name: "RLIMIT_CPU", Soft: uint64(limits.CPUSeconds), Hard: uint64(limits.CPUSeconds) + 1}}
	}
	fail := func(probe, why string) string { return probe + ": " + why }
	cl, err := agent.Dial(ctx, c.Conn(), hello)
	if err != nil {
		// The sandbox died before it could serve: with these limits the
		// runtime cannot run one.
		return fail(start, fmt.Sprintf("a sandbox with limits %s did not start serving: %v", limitsText(limits), err)), nil
	}
	defer cl.Close()
	pr := &prober{ctx: ctx, cl: cl}
	run := map[string]func() string{
		"syscalls": pr.syscalls, "filesystem": pr.filesystem, "cpu": pr.cpu,
		"timeouts": pr.timeouts, "pids": pr.pids, "memory": pr.memory,
	}
	for _, name := range probes {
		if why := run[name](); why != "" {
			return fail(name, why), nil
		}
	}
	return "", nil
}

// prober runs the probes over one agent client. Each returns "" when the
// control held, else what happened.
type prober struct {
	ctx context.Context
	cl  *agent.Client
}

func (pr *prober) exec(timeout time.Duration, args ...string) (string, wire.ExecReply, error) {
	var mu sync.Mutex
	var buf bytes.Buffer
	call, err := pr.cl.Start("exec", wire.ExecRequest{Args: args, TimeoutMs: timeout.Milliseconds()}, agent.Handlers{
		OnData: func(_ wire.FrameType, b []byte) { mu.Lock(); buf.Write(b); mu.Unlock() },
	})
	var rep wire.ExecReply
	if err != nil {
		return "", rep, err
	}
	raw, err := call.WaitContext(pr.ctx)
	if err != nil {
		return "", rep, err
	}
	err = json.Unmarshal(raw, &rep)
	mu.Lock()
	defer mu.Unlock()
	return buf.String(), rep, err
}

// alive is "" when the agent still serves a command, else why not.
func (pr *prober) alive(after string) string {
	out, rep, err := pr.exec(10*time.Second, "echo", "alive")
	if err != nil || rep.ExitCode != 0 || strings.TrimSpace(out) != "alive" {
		return fmt.Sprintf("the sandbox did not survive %s (%v)", after, err)
	}
	return ""
}

func (pr *prober) syscalls() string {
	out, _, err := pr.exec(10*time.Second, agentPath, server.ProbeArg)
	if err != nil {
		return "running the probe program failed: " + err.Error()
	}
	var allowed []string
	for _, name := range []string{"ptrace", "io_uring_setup"} {
		if !strings.Contains(out, name+"=refused") {
			allowed = append(allowed, name)
		}
	}
	if len(allowed) > 0 {
		return strings.Join(allowed, " and ") + " allowed, although the seccomp allowlist refuses them"
	}
	return ""
}

func (pr *prober) filesystem() string {
	if _, rep, err := pr.exec(10*time.Second, "sh", "-c", "ln -s / .probe-root && ln -s /etc/hostname .probe-file"); err != nil || rep.ExitCode != 0 {
		return fmt.Sprintf("could not make the probe's symbolic links (%v)", err)
	}
	for _, path := range []string{".probe-root/etc/hostname", ".probe-file"} {
		var rep wire.FSReadReply
		if err := pr.cl.Do(pr.ctx, "fs.read", wire.FSReadRequest{Path: path}, &rep); err == nil {
			return fmt.Sprintf("the file API read %s, a symbolic link out of the workspace", path)
		}
	}
	var matches []wire.Match
	if err := pr.cl.Do(pr.ctx, "fs.search", wire.FSSearchRequest{Pattern: "sandbox", Path: ".", All: true}, &matches); err == nil {
		for _, m := range matches {
			if strings.HasPrefix(m.Path, ".probe-") {
				return "search read " + m.Path + ", a symbolic link out of the workspace"
			}
		}
	}
	return ""
}

func (pr *prober) cpu() string {
	_, rep, err := pr.exec(30*time.Second, "sh", "-c", "while :; do :; done")
	if err != nil {
		return err.Error()
	}
	if rep.TimedOut || rep.Signal == "" {
		return fmt.Sprintf("an RLIMIT_CPU of 1 s did not stop a CPU spin (%s later: exit %d, signal %q)", time.Duration(rep.DurationNs).Round(time.Millisecond), rep.ExitCode, rep.Signal)
	}
	return ""
}

func (pr *prober) timeouts() string {
	_, rep, err := pr.exec(300*time.Millisecond, "sh", "-c", "sleep 60 & sleep 60")
	if err != nil {
		return err.Error()
	}
	if !rep.TimedOut {
		return "a command past its timeout was not reported as timed out"
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		out, _, err := pr.exec(10*time.Second, "sh", "-c", `n=0; for f in /proc/[0-9]*/comm; do read c < "$f" 2>/dev/null && [ "$c" = sleep ] && n=$((n+1)); done; echo $n`)
		if err != nil {
			return err.Error()
		}
		if strings.TrimSpace(out) == "0" {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.TrimSpace(out) + " processes of a timed-out command still ran 3 s later"
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (pr *prober) pids() string {
	// 64 processes against a limit of 16: the forks past it fail, and the
	// sandbox must stay usable.
	_, _, err := pr.exec(20*time.Second, "sh", "-c", "i=0; while [ $i -lt 64 ]; do sleep 1 & i=$((i+1)); done 2>/dev/null; wait")
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("the sandbox died at its pids limit (%v)", err)
	}
	return pr.alive("its pids limit")
}

func (pr *prober) memory() string {
	// tail keeps a line without newline whole: 512 MiB against a limit of
	// 128 MiB. The allocator is killed; the sandbox must stay usable.
	_, _, err := pr.exec(60*time.Second, "sh", "-c", "head -c 536870912 /dev/zero | tail -n 1 >/dev/null")
	if err != nil {
		return fmt.Sprintf("the sandbox died at its memory limit (%v)", err)
	}
	return pr.alive("its memory limit")
}

func limitsText(l driver.Limits) string {
	var parts []string
	if l.CPUSeconds > 0 {
		parts = append(parts, fmt.Sprintf("cpu %d s", l.CPUSeconds))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if l.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", l.MemoryBytes>>20))
	}
	return strings.Join(parts, ", ")
}
