package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/server"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Labels on every container and agent volume this backend creates.
const (
	LabelSandboxkit = "sandboxkit"         // always "1"
	LabelID         = "sandboxkit.id"      // driver.Config.ID
	LabelOwner      = "sandboxkit.owner"   // driver.Config.Owner
	LabelCreated    = "sandboxkit.created" // creation time, RFC 3339
)

// Container is one sandbox's running container. It is the driver.Instance
// that Start returns; its extra methods are reachable by type assertion.
type Container struct {
	d     *Driver
	id    string
	name  string
	iso   driver.Isolation
	conn  *stream
	limit int64 // memory limit, for messages
	pids  int64 // the container's pids limit (0: none), for messages

	done    chan struct{}
	cancel  context.CancelFunc // stops the watchers
	wg      sync.WaitGroup
	mu      sync.Mutex
	exitErr error
	oom     bool
	killSig string // the signal of the engine's last kill event, "" if none
	paused  bool

	closeOnce sync.Once
	closeErr  error

	// handoff is the egress proxy's handoff socket (egress_handoff.go),
	// nil without one.
	handoff *handoffSocket
}

// launch creates, verifies, attaches and starts the container for p.
func (d *Driver) launch(ctx context.Context, p *plan, f *engineFacts, imageID string, ag *agentBin, agentVol string) (_ *Container, err error) {
	cfg, hc := containerSpec(p, ag, agentVol)
	handoff := d.newHandoffSocket(p.cfg.Egress)
	if handoff != nil {
		hc.Mounts = append(hc.Mounts, handoff.mount())
		defer func() {
			if err != nil {
				handoff.close()
			}
		}()
	}
	created, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, p.name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return nil, driver.Errorf(driver.CodeExists, err, fmt.Sprintf(
				"a container named %s already exists (a sandbox with id %q is running or was left behind); use another sandbox id, or remove leftovers with `sandboxkit gc`",
				p.name, p.cfg.ID))
		}
		if cerrdefs.IsNotFound(err) {
			return nil, driver.Errorf(driver.CodeNotFound, err, fmt.Sprintf("image %q disappeared from the Docker engine; retry", p.image))
		}
		return nil, d.engineError("creating the sandbox container", err)
	}
	id := created.ID
	defer func() {
		if err != nil {
			// Nothing half-made stays behind, even if ctx is what failed.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = d.cli.ContainerRemove(rctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	}()
	// The engine warns instead of failing when the kernel cannot apply a
	// resource control ("Your kernel does not support ... limit"): that is
	// a control not in force, so it is refused. Missing swap accounting
	// only means no swap limit on top of memory, and other warnings (e.g.
	// forwarding off when a network was allowed) are reported as gaps.
	var gaps []string
	for _, w := range created.Warnings {
		lw := strings.ToLower(w)
		if strings.Contains(lw, "does not support") && !strings.Contains(lw, "swap") {
			return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
				"the Docker engine will not apply every requested control: %s; enable that cgroup controller on the engine's host or drop the limit", w))
		}
		gaps = append(gaps, "engine warning: "+w)
	}
	if err := d.verify(ctx, id, hc, p.user); err != nil {
		return nil, err
	}

	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Container{d: d, id: id, name: p.name, done: make(chan struct{}), cancel: cancel, limit: p.cfg.Limits.MemoryBytes, handoff: handoff}
	if hc.PidsLimit != nil {
		c.pids = *hc.PidsLimit
	}
	defer func() {
		if err != nil {
			cancel()
			c.wg.Wait()
		}
	}()
	// The wait and the event watch are registered before the start so no
	// exit, OOM or kill can be missed: they are how a death is explained.
	waitC, waitErrC := d.cli.ContainerWait(wctx, id, container.WaitConditionNextExit)
	evC, evErrC := d.cli.Events(wctx, events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("container", id),
		filters.Arg("event", string(events.ActionOOM)),
		filters.Arg("event", string(events.ActionKill)),
	)})
	// Both watchers start now: an unread ContainerWait result would block
	// the client library's goroutine forever.
	c.wg.Add(2)
	go c.watchEvents(evC, evErrC)
	go c.watchExit(waitC, waitErrC)
	hj, err := d.cli.ContainerAttach(context.WithoutCancel(ctx), id, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, d.engineError("attaching to the sandbox container", err)
	}
	c.setConn(newStream(hj, d.target.deadlines, &c.wg, c.streamEnd))
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		c.conn.Close()
		if strings.Contains(err.Error(), agentPath) && strings.Contains(err.Error(), "no such file") {
			return nil, errAgentMissing
		}
		return nil, d.startError(p, err)
	}
	c.iso = d.isolation(p, f, id, imageID, ag, gaps)
	return c, nil
}

// errAgentMissing is a start that failed because the agent volume was
// empty; Start refills it and retries.
var errAgentMissing = errors.New("agent missing from its volume")

// startError explains a failed container start.
func (d *Driver) startError(p *plan, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "exec format error"):
		return driver.Errorf(driver.CodeIsolationUnavailable, err, "the agent binary does not match the engine's architecture; pass a static agent for it with docker.WithAgentBinary")
	case strings.Contains(msg, "unknown or invalid runtime") || strings.Contains(msg, "runtime") && strings.Contains(msg, "not found"):
		return driver.Errorf(driver.CodeIsolationUnavailable, err, fmt.Sprintf("the Docker engine cannot start runtime %q; check its installation", p.runtime))
	}
	return d.engineError("starting the sandbox container", err)
}

// containerSpec is the whole security and resource configuration of a
// sandbox container. Each setting names what it prevents.
func containerSpec(p *plan, ag *agentBin, agentVol string) (*container.Config, *container.HostConfig) {
	lim := p.cfg.Limits
	labels := p.creator.labels()
	maps.Copy(labels, map[string]string{
		LabelSandboxkit: "1",
		LabelID:         p.cfg.ID,
		LabelOwner:      p.cfg.Owner,
		LabelCreated:    time.Now().UTC().Format(time.RFC3339),
	})
	cfg := &container.Config{
		Image:    p.image,
		Hostname: "sandbox",
		// An unprivileged user: files of root in the image stay read-only
		// even where a mount is writable.
		User:       p.user,
		Entrypoint: ag.args,
		Cmd:        nil,
		WorkingDir: workspacePath,
		// The agent's only channel is stdin/stdout. StdinOnce closes its
		// stdin when our attach ends, so a crashed host makes it exit.
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		OpenStdin: true, StdinOnce: true, Tty: false,
		Labels: labels,
	}
	tmp := lim.TmpBytes
	if tmp <= 0 {
		tmp = defaultTmpBytes
	}
	hc := &container.HostConfig{
		// No network interface but lo: nothing can be reached or served.
		NetworkMode: "none",
		// No capabilities: no mounts, raw sockets, chown, ptrace of others...
		CapDrop: []string{"ALL"},
		// setuid binaries in the image cannot raise privileges.
		SecurityOpt: []string{"no-new-privileges"},
		// The image cannot be modified; writes go to the tmpfs below.
		ReadonlyRootfs: true,
		// The engine mounts a tmpfs noexec unless told "exec": scripts
		// and programs the agent writes or builds must run, as they do
		// on every backend. nosuid and nodev stay.
		Tmpfs: map[string]string{
			"/tmp": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", tmp),
		},
		ShmSize:    defaultShmBytes,
		IpcMode:    "private",
		PidMode:    "",
		AutoRemove: true,
		Runtime:    p.runtime,
		Init:       boolPtr(false), // the agent is PID 1 and reaps
		// The agent, read-only: the sandbox cannot replace what serves it.
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: agentVol, Target: agentDir, ReadOnly: true,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true}}},
		// The protocol stream is not worth logging (and would fill the
		// engine's disk): `docker logs` shows nothing for sandboxes.
		LogConfig: container.LogConfig{Type: "none"},
	}
	if p.seccomp != "" {
		hc.SecurityOpt = append(hc.SecurityOpt, "seccomp="+p.seccomp)
	}
	if p.cfg.Network {
		hc.NetworkMode = "default"
	}
	if p.cfg.Workspace != "" {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: p.cfg.Workspace, Target: workspacePath,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	} else {
		ws := lim.DiskBytes
		if ws <= 0 {
			ws = defaultWorkspaceBytes
		}
		hc.Tmpfs[workspacePath] = fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,uid=%d,gid=%d,mode=0700", ws, p.uid, p.gid)
	}
	if lim.MemoryBytes > 0 {
		hc.Memory = lim.MemoryBytes
		hc.MemorySwap = lim.MemoryBytes // no swap on top
	}
	if lim.Pids > 0 {
		// The pids cgroup counts threads, the agent's included, and the
		// Go runtime aborts when it cannot make one: a fork bomb that
		// filled a limit of exactly Pids killed the agent, PID 1, and the
		// container with the user's workspace (5 of 8 runs of the escape
		// suite's ForkBomb probe). The agent makes its threads before it
		// starts any process (server.ServeStdio), inside a reserve added on
		// top of the commands' limit.
		n := int64(lim.Pids) + agentTaskReserve
		hc.PidsLimit = &n
	}
	hc.NanoCPUs = p.nanoCPUs
	// CPU time is a per-process rlimit that the agent sets on each child
	// (see the controls in isolation): an engine ulimit would also bind
	// the agent, which as PID 1 would die of its own CPU time. File size
	// is an engine ulimit, inherited by every process: set by the agent
	// after a command started, it came too late for a command that wrote
	// at once (head -c 5000 > f finished in 0.3 ms and wrote past an
	// RLIMIT_FSIZE of 1000, 1 contract run in 4). It binds the agent too,
	// which checks FileSizeBytes before its own writes anyway (and, as a
	// Go program, gets EFBIG rather than SIGXFSZ).
	if lim.FileSizeBytes > 0 {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "fsize", Soft: lim.FileSizeBytes, Hard: lim.FileSizeBytes})
	}
	if lim.OpenFiles > 0 {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "nofile", Soft: int64(lim.OpenFiles), Hard: int64(lim.OpenFiles)})
	}
	hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "core", Soft: 0, Hard: 0})
	return cfg, hc
}

func boolPtr(b bool) *bool { return &b }

// agentTaskReserve is added to the commands' pids limit for the agent's
// own threads (server.StdioTaskReserve); a variable only so that a test can
// take it away and show what a starved agent's death looks like.
var agentTaskReserve int64 = server.StdioTaskReserve

// checkHostWorkspace makes sure the sandbox user can write the host
// directory it gets, so the failure is clear now rather than on first write.
func checkHostWorkspace(dir string, uid, gid int) error {
	st, err := os.Stat(dir)
	if err != nil {
		return driver.Errorf(driver.CodeInvalidArgument, err, "the workspace directory does not exist on this machine (a host workspace needs a local Docker engine)")
	}
	if !st.IsDir() {
		return driver.Errorf(driver.CodeInvalidArgument, nil, fmt.Sprintf("the workspace %s is not a directory", dir))
	}
	ouid, ogid, ok := fileOwner(st)
	if !ok {
		return nil
	}
	mode := st.Mode().Perm()
	writable := uid == 0 ||
		(ouid == uid && mode&0o200 != 0) ||
		(ogid == gid && mode&0o020 != 0) ||
		mode&0o002 != 0
	if !writable {
		return driver.Errorf(driver.CodeInvalidArgument, nil, fmt.Sprintf(
			"the sandbox user %d:%d cannot write the workspace %s (owner %d:%d, mode %v); chown it to that user, or choose the owner's uid:gid with docker.WithUser",
			uid, gid, dir, ouid, ogid, mode))
	}
	return nil
}

// verify reads the created container back and refuses it when the engine
// dropped a control it was asked for (an old API silently ignoring a field
// must not weaken a sandbox).
func (d *Driver) verify(ctx context.Context, id string, want *container.HostConfig, user string) error {
	ins, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return d.engineError("inspecting the new sandbox container", err)
	}
	got := ins.HostConfig
	var missing []string
	check := func(ok bool, what string) {
		if !ok {
			missing = append(missing, what)
		}
	}
	check(got.ReadonlyRootfs, "read-only root file system")
	check(len(got.CapDrop) == 1 && strings.EqualFold(got.CapDrop[0], "ALL"), "cap-drop ALL")
	check(string(got.NetworkMode) == string(want.NetworkMode), "network mode "+string(want.NetworkMode))
	check(containsStr(got.SecurityOpt, "no-new-privileges"), "no-new-privileges")
	for _, o := range want.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") {
			check(slices.Contains(got.SecurityOpt, o), "the sandbox's seccomp profile")
		}
	}
	check(got.Memory == want.Memory, "memory limit")
	check(want.PidsLimit == nil || got.PidsLimit != nil && *got.PidsLimit == *want.PidsLimit, "pids limit")
	check(got.NanoCPUs == want.NanoCPUs, "cpu rate limit")
	check(got.Runtime == want.Runtime || want.Runtime == "" && got.Runtime == "runc", "runtime "+want.Runtime)
	for k, v := range want.Tmpfs {
		check(got.Tmpfs[k] == v, "tmpfs "+k)
	}
	check(ins.Config != nil && ins.Config.User == user, "user "+user)
	if len(missing) > 0 {
		return driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
			"the Docker engine (API %s) did not apply: %s; upgrade the engine or use another backend",
			d.cli.ClientVersion(), strings.Join(missing, ", ")))
	}
	return nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s || strings.HasPrefix(x, s+":") || strings.HasPrefix(x, s+"=") {
			return true
		}
	}
	return false
}

// isolation is the truthful report of what launch applied.
func (d *Driver) isolation(p *plan, f *engineFacts, id, imageID string, ag *agentBin, gaps []string) driver.Isolation {
	lim := p.cfg.Limits
	mech := "runc container"
	if p.tier == driver.TierGVisor {
		mech = "gVisor (" + p.runtime + ")"
	}
	ctl := func(name string, on bool, how string) driver.Control {
		return driver.Control{Name: name, Enforced: on, Mechanism: how}
	}
	// ctlR is a control enforced by an rlimit, set by the agent on each
	// process it starts (byAgent) or by this backend before the agent.
	ctlR := func(name string, on bool, how string, r driver.Rlimit, byAgent bool) driver.Control {
		c := ctl(name, on, how)
		if on {
			c.Rlimit, c.SetByAgent = r, byAgent
		}
		return c
	}
	network, fs, syscalls := "network mode none (only lo)", "read-only root file system; writable tmpfs /tmp and ", "engine default seccomp profile"
	if p.seccomp != "" {
		syscalls = seccompMechanism()
	}
	if p.cfg.Network {
		network = "engine default network (allowed by config)"
	}
	if p.cfg.Workspace == "" {
		fs += "tmpfs " + workspacePath
	} else {
		fs += "bind-mounted workspace directory"
	}
	if !f.seccomp {
		syscalls = "no seccomp profile on this engine"
	}
	cs := []driver.Control{
		ctl("network", !p.cfg.Network, network),
		ctl("filesystem", true, fs),
		ctl("privileges", p.uid != 0, fmt.Sprintf("user %s, cap-drop ALL, no-new-privileges", p.user)),
		ctl("syscalls", f.seccomp || p.tier == driver.TierGVisor, syscalls+"; "+mech),
		ctl("processes_visible", true, "private pid namespace (agent is PID 1)"),
		ctl("signals", true, "private pid namespace: no host process can be named"),
		ctl("ipc", true, "private ipc and uts namespaces"),
		ctl("pause", true, "engine pause (cgroup freezer)"),
		// Close removes the container: the kernel kills every process of
		// its pid namespace, setsid daemons included. A host that dies
		// closes the attach stream; the agent exits on EOF and takes the
		// namespace with it, and the engine auto-removes the container.
		ctl("lifetime", true, "container removed on Close (pid namespace killed); agent exits when its stream closes; auto-remove"),
		ctl("memory", lim.MemoryBytes > 0, "cgroup memory limit without swap (docker --memory)"),
		ctl("pids", lim.Pids > 0, fmt.Sprintf("cgroup pids limit (docker --pids-limit %d: Limits.Pids plus %d tasks reserved for the agent's threads)", int64(lim.Pids)+agentTaskReserve, agentTaskReserve)),
		ctlR("cpu", lim.CPUSeconds > 0, "RLIMIT_CPU per process, set by the agent on each child", driver.RlimitCPU, true),
		ctlR("file_size", lim.FileSizeBytes > 0, "RLIMIT_FSIZE (docker ulimit fsize)", driver.RlimitFSIZE, false),
		ctlR("open_files", lim.OpenFiles > 0, "RLIMIT_NOFILE (docker ulimit nofile)", driver.RlimitNOFILE, false),
		ctl("tmp", true, fmt.Sprintf("tmpfs /tmp size=%d", tmpSize(lim))),
	}
	if p.cfg.Workspace == "" {
		cs = append(cs, ctl("disk", true, fmt.Sprintf("tmpfs %s size=%d (hard quota)", workspacePath, wsSize(lim))))
	} else {
		cs = append(cs, ctl("disk", false, "host directory bind mount: no quota"))
	}
	if p.nanoCPUs > 0 {
		cs = append(cs, ctl("cpu_rate", true, fmt.Sprintf("CFS quota %.3g CPUs", float64(p.nanoCPUs)/1e9)))
	}
	gaps = append(gaps, "files in the tmpfs /tmp, /workspace and /dev/shm count against the memory limit")
	if lim.Pids > 0 {
		// One pids cgroup for the container (the agent has no way to make
		// a child cgroup for its commands: the engine mounts the cgroup
		// file system read-only and the container has no capabilities).
		gaps = append(gaps, fmt.Sprintf("the container's pids limit is shared with the agent: commands may also use the part of its %d-task reserve that its threads leave free", server.StdioTaskReserve))
	}
	if p.cfg.Workspace == "" {
		gaps = append(gaps, "the workspace is a tmpfs inside the container: copy results out before Close")
	}
	if p.uid == 0 {
		gaps = append(gaps, "processes run as uid 0 inside the container (without capabilities)")
	}
	if !f.seccomp && p.tier != driver.TierGVisor {
		gaps = append(gaps, "the engine applies no seccomp profile")
	}
	// HostWorkspace is a directory of this machine: only when the engine
	// is. With an engine elsewhere the files are on its machine, and Info
	// says so instead (engine_workspace, engine_host).
	host, engineWS := "", ""
	if p.cfg.Workspace != "" {
		if d.target.local {
			host = p.cfg.Workspace
		} else {
			engineWS = p.cfg.Workspace
		}
	}
	iso := driver.Isolation{
		Tier: p.tier, Controls: cs, Gaps: gaps,
		WorkspacePath: workspacePath, HostWorkspace: host,
		Extra: map[string]string{
			"container_id":   id,
			"container_name": p.name,
			"image":          p.image,
			"image_id":       imageID,
			"runtime":        runtimeName(p.runtime),
			"engine":         f.version,
			"api_version":    f.api,
			"cgroup":         f.cgroup,
			"agent":          ag.source,
			"engine_host":    d.target.where,
		},
	}
	if engineWS != "" {
		iso.Extra["engine_workspace"] = engineWS
		iso.Gaps = append(iso.Gaps, fmt.Sprintf("the workspace is %s on the Docker engine's machine (%s), which may not be this one", engineWS, d.target.where))
	}
	return iso
}

func tmpSize(l driver.Limits) int64 {
	if l.TmpBytes > 0 {
		return l.TmpBytes
	}
	return defaultTmpBytes
}

func wsSize(l driver.Limits) int64 {
	if l.DiskBytes > 0 {
		return l.DiskBytes
	}
	return defaultWorkspaceBytes
}

// ID returns the container's id.
func (c *Container) ID() string { return c.id }

// Conn returns the agent's stream: the container's stdin for writing and
// its demultiplexed stdout for reading. Closing it closes the container's
// stdin, which makes the agent exit.
func (c *Container) Conn() io.ReadWriteCloser { return c.conn }

// Isolation reports what was applied to this container.
func (c *Container) Isolation() driver.Isolation {
	iso := c.iso
	iso.Controls = append([]driver.Control(nil), c.iso.Controls...)
	iso.Gaps = append([]string(nil), c.iso.Gaps...)
	iso.Extra = make(map[string]string, len(c.iso.Extra))
	for k, v := range c.iso.Extra {
		iso.Extra[k] = v
	}
	return iso
}

// Done is closed when the container has exited.
func (c *Container) Done() <-chan struct{} { return c.done }

// Err says why the container died, once Done is closed: nil after Close,
// else a *driver.Error with code DEAD (naming the OOM killer when it was
// the cause).
func (c *Container) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exitErr == errClosed {
		return nil
	}
	return c.exitErr
}

// OOMKilled reports whether the kernel's OOM killer killed any process of
// the container (the agent survives when it was a child).
func (c *Container) OOMKilled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.oom
}

// Pause freezes every process in the container (cgroup freezer).
func (c *Container) Pause(ctx context.Context) error {
	if err := c.alive(); err != nil {
		return err
	}
	if err := c.d.cli.ContainerPause(ctx, c.id); err != nil {
		return c.d.engineError("pausing the sandbox container", err)
	}
	c.mu.Lock()
	c.paused = true
	c.mu.Unlock()
	return nil
}

// Resume thaws a paused container.
func (c *Container) Resume(ctx context.Context) error {
	if err := c.alive(); err != nil {
		return err
	}
	if err := c.d.cli.ContainerUnpause(ctx, c.id); err != nil {
		return c.d.engineError("resuming the sandbox container", err)
	}
	c.mu.Lock()
	c.paused = false
	c.mu.Unlock()
	return nil
}

func (c *Container) alive() error {
	select {
	case <-c.done:
		if err := c.Err(); err != nil {
			return err
		}
		return driver.Errorf(driver.CodeDead, nil, "the sandbox container is gone; create a new sandbox")
	default:
		return nil
	}
}

// Close kills the container and removes it with its agent volume. It is
// idempotent and returns when the container is gone from the engine.
func (c *Container) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.destroy(ctx) })
	return c.closeErr
}

func (c *Container) destroy(ctx context.Context) error {
	defer func() {
		c.cancel()
		c.wg.Wait()
	}()
	defer c.handoff.close()
	c.mu.Lock()
	if c.exitErr == nil {
		c.exitErr = errClosed
	}
	paused := c.paused
	c.mu.Unlock()
	c.conn.Close()
	if paused {
		// A frozen container cannot be killed on every engine.
		_ = c.d.cli.ContainerUnpause(ctx, c.id)
	}
	err := c.d.cli.ContainerRemove(ctx, c.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
	case cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "already in progress"):
		// Auto-remove won the race; wait until it is finished.
		wc, ec := c.d.cli.ContainerWait(ctx, c.id, container.WaitConditionRemoved)
		select {
		case <-wc:
		case <-ec:
		}
	default:
		return c.d.engineError("removing the sandbox container", err)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return c.d.engineError("waiting for the sandbox container to stop", ctx.Err())
	}
	return nil
}

// errClosed marks a container that exited because it was closed; Err
// reports nil for it.
var errClosed = driver.Errorf(driver.CodeDead, nil, "the sandbox was closed")

func (c *Container) watchExit(waitC <-chan container.WaitResponse, errC <-chan error) {
	defer c.wg.Done()
	var code int64 = -1
	var werr error
	select {
	case r := <-waitC:
		code = r.StatusCode
		if r.Error != nil && r.Error.Message != "" {
			werr = fmt.Errorf("%s", r.Error.Message)
		}
	case werr = <-errC:
	}
	// Give the OOM or kill event a moment to arrive: the engine sends it
	// around the same time as the exit.
	if code == 137 {
		time.Sleep(50 * time.Millisecond)
	}
	c.mu.Lock()
	if c.exitErr == nil {
		c.exitErr = c.deathError(code, werr)
	}
	c.mu.Unlock()
	close(c.done)
}

// setConn publishes the stream to watchExit, which may already run.
func (c *Container) setConn(s *stream) {
	c.mu.Lock()
	c.conn = s
	c.mu.Unlock()
}

// deathError says why the container died, from what the engine and the
// agent told: the OOM event, the agent's last words on stderr (the Go
// runtime names a thread it could not create), the engine's kill event,
// the exit status. It runs with c.mu held.
func (c *Container) deathError(code int64, werr error) error {
	head, tail := "", ""
	if c.conn != nil {
		head, tail = c.conn.stderrHead(), c.conn.stderrTail()
	}
	detail := ""
	if cause := crashCause(head); cause != "" {
		detail = "; agent said: " + cause
	} else if tail != "" {
		detail = "; agent said: " + lastLines(tail, 3)
	}
	switch {
	case c.oom:
		return driver.Errorf(driver.CodeDead, werr, fmt.Sprintf(
			"the sandbox container was killed by the OOM killer (memory limit %d bytes, tmpfs files included); raise Limits.MemoryBytes or use less memory, then create a new sandbox%s",
			c.limit, detail))
	case threadExhaustion(head):
		limit := "no pids limit"
		if c.pids > 0 {
			limit = fmt.Sprintf("pids limit %d tasks, threads included", c.pids)
		}
		return driver.Errorf(driver.CodeDead, werr, fmt.Sprintf(
			"the sandbox's agent died: it could not create a thread because the container's tasks were exhausted (%s), most likely by a fork bomb or too many processes; lower the commands' process count or raise Limits.Pids, then create a new sandbox%s",
			limit, detail))
	case c.killSig != "":
		return driver.Errorf(driver.CodeDead, werr, fmt.Sprintf(
			"the sandbox container was killed through the Docker engine (signal %s: docker kill, docker stop, docker rm -f or the engine shutting down); create a new sandbox%s",
			c.killSig, detail))
	case code == 137:
		return driver.Errorf(driver.CodeDead, werr, "the sandbox container was killed by SIGKILL from outside the engine (e.g. kill -9 of its process on the engine's machine); create a new sandbox"+detail)
	case code >= 0:
		return driver.Errorf(driver.CodeDead, werr, "the sandbox container exited with status "+strconv.FormatInt(code, 10)+"; create a new sandbox"+detail)
	}
	return driver.Errorf(driver.CodeDead, werr, "lost track of the sandbox container; create a new sandbox"+detail)
}

// threadExhaustion recognises the Go runtime's last words when it cannot
// create an OS thread (pure Go: newosproc; with cgo: pthread_create).
func threadExhaustion(stderr string) bool {
	return strings.Contains(stderr, "failed to create new OS thread") ||
		strings.Contains(stderr, "pthread_create failed") ||
		strings.Contains(stderr, "newosproc")
}

// crashCause returns the Go runtime's report of a fatal error in the
// agent's stderr (the lines from "fatal error:" or "runtime:" up to the
// stack dump), or "".
func crashCause(stderr string) string {
	i := strings.Index(stderr, "runtime: ")
	if j := strings.Index(stderr, "fatal error: "); i < 0 || j >= 0 && j < i {
		i = j
	}
	if i < 0 {
		return ""
	}
	s := stderr[i:]
	for _, end := range []string{"\n\nruntime stack:", "\n\ngoroutine ", "\ngoroutine "} {
		if k := strings.Index(s, end); k >= 0 {
			s = s[:k]
		}
	}
	return lastLines(strings.TrimSpace(s), 4)
}

// lastLines returns the last n lines of s, joined on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// streamEnd is the error the agent's stream ends with: once the container
// has died, the reason it died, so that a call cut short by the death
// (and every later one) carries the cause instead of a bare "the agent is
// gone". A stream that ends otherwise (Close, or no death seen in time)
// ends with io.EOF.
func (c *Container) streamEnd() error {
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		return io.EOF
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exitErr == nil || c.exitErr == errClosed {
		return io.EOF
	}
	return c.exitErr
}

func (c *Container) watchEvents(evC <-chan events.Message, errC <-chan error) {
	defer c.wg.Done()
	for {
		select {
		case ev, ok := <-evC:
			if !ok {
				return
			}
			c.mu.Lock()
			switch ev.Action {
			case events.ActionOOM:
				c.oom = true
			case events.ActionKill:
				c.killSig = ev.Actor.Attributes["signal"]
				if c.killSig == "" {
					c.killSig = "unknown"
				}
			}
			c.mu.Unlock()
		case <-errC:
			return
		}
	}
}

// stream is the agent's byte stream over a hijacked attach connection.
type stream struct {
	hj   types.HijackedResponse
	pr   *io.PipeReader
	once sync.Once
	// deadlines: the engine's connection honours them (engineTarget).
	deadlines bool

	mu   sync.Mutex
	head []byte // first bytes the agent wrote to stderr
	tail []byte // last bytes the agent wrote to stderr
}

// The agent writes to stderr only its own diagnostics, so the head holds
// the cause of a crash (the Go runtime prints it first, then a goroutine
// dump of many KiB), and the tail its last words.
const (
	stderrHeadBytes = 4 << 10
	stderrTailBytes = 2 << 10
)

// newStream reads the attach connection in the background; end gives the
// error the stream's reader sees once the connection has ended.
func newStream(hj types.HijackedResponse, deadlines bool, wg *sync.WaitGroup, end func() error) *stream {
	pr, pw := io.Pipe()
	s := &stream{hj: hj, pr: pr, deadlines: deadlines}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The engine multiplexes stdout and stderr on one connection
		// (no tty); stdout is the protocol, stderr the agent's log.
		_, err := stdcopy.StdCopy(pw, tailWriter{s}, hj.Reader)
		if err == nil {
			err = end()
		}
		pw.CloseWithError(err)
	}()
	return s
}

func (s *stream) Read(p []byte) (int, error)  { return s.pr.Read(p) }
func (s *stream) Write(p []byte) (int, error) { return s.hj.Conn.Write(p) }

// SetWriteDeadline interrupts a Write blocked on an agent that reads
// nothing (agent.Client gives up at its caller's deadline); an error when
// the engine's connection has no deadlines (then the client writes on a
// goroutine instead).
func (s *stream) SetWriteDeadline(t time.Time) error {
	if !s.deadlines {
		return errNoDeadlines
	}
	return s.hj.Conn.SetWriteDeadline(t)
}

// errNoDeadlines: the engine's connection does not honour deadlines.
var errNoDeadlines = errors.New("the engine's connection (a connection helper, or a client the caller made) does not honour deadlines")

// Close ends the agent's stdin (it exits on EOF) and the connection.
func (s *stream) Close() error {
	s.once.Do(func() {
		_ = s.hj.CloseWrite()
		s.hj.Close()
		s.pr.Close()
	})
	return nil
}

func (s *stream) stderrTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(string(s.tail))
}

func (s *stream) stderrHead() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(string(s.head))
}

type tailWriter struct{ s *stream }

func (w tailWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if n := min(len(p), stderrHeadBytes-len(w.s.head)); n > 0 {
		w.s.head = append(w.s.head, p[:n]...)
	}
	w.s.tail = append(w.s.tail, p...)
	if len(w.s.tail) > stderrTailBytes {
		w.s.tail = append([]byte(nil), w.s.tail[len(w.s.tail)-stderrTailBytes:]...)
	}
	return len(p), nil
}
