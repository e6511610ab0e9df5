// Package sandbox gives an LLM agent a safe, stateful place to run code:
// one-shot commands, background jobs, a confined filesystem with search,
// (and, built on the same agent, bash sessions and a Python kernel).
//
// A Sandbox is created with New on the local backend by default, or on any
// backend passed with WithDriver. Its services hang off it and read like
// the feature list:
//
//	sb, err := sandbox.New(ctx)
//	defer sb.Close()
//	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "echo hi"})
//	err = sb.Files.Write(ctx, "notes.txt", []byte("hello"), 0)
//
// Security model: controls are real or refused. Every control the caller
// declares (limits, no network, confinement) is enforced by the backend or
// New fails with SBX_ISOLATION_UNAVAILABLE; Info reports what is in force
// and how. The environment is minimal by default: the host's variables
// (which hold the agent's API keys) never reach the sandbox. Every call
// that runs something has a timeout.
//
// Everything here is implemented once over the in-sandbox agent's
// protocol; a backend only starts the agent and carries its stream.
//
// # Conventions
//
// One call shape per kind of thing, so that a call reads the same whichever
// service it belongs to:
//
//   - Constructors take functional options: New(ctx, WithLimits(...),
//     WithEgress(...)), NewPool(ctx, cfg, options...).
//   - A call with optional settings takes an option struct as its last
//     argument, whose zero value is the default:
//     Files.Read(ctx, path, ReadOptions{}), Files.Move(ctx, from, to,
//     MoveOptions{Overwrite: true}), Shell.Wait(ctx, ShellWaitOptions{}).
//     No positional bools, no bare positional timeouts: a timeout is a
//     Timeout field, and 0 means the sandbox's Limits.Timeout.
//   - Every call that talks to the sandbox takes a context.Context first;
//     cancelling it abandons the call (and, for calls that run code,
//     interrupts the code). That holds even when the sandbox's agent has
//     stopped reading (a stopped, frozen or hostile agent): the call ends
//     with SBX_CANCELED (SBX_TIMEOUT when its deadline passed) within
//     the 2 s the agent gets to confirm, plus the Python kernel's and a
//     bash session's own kill graces for those calls, and later calls are
//     not stuck behind it. Accessors of state the Sandbox value holds
//     (ID, Info, Shell.ID, Shells.Get, Commands.Job) take none, and Close
//     methods follow io.Closer.
//   - Errors come last and are *Error values with a stable Code
//     (SBX_NOT_FOUND, SBX_TIMEOUT, ...); match them with CodeOf or
//     errors.Is against the Err* values. What the code did (a non-zero
//     exit, a Python exception, a timed-out command's partial output) is
//     data in the result, not an error.
//   - Result types belong to this package and document their fields; the
//     only types re-exported from another package are those of
//     sandbox/driver (Tier, Control, Code, CodeInfo), the public contract
//     for backends.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

// Tier is an isolation level; see the constants.
type Tier = driver.Tier

// The isolation tiers, weakest first.
const (
	TierNone      = driver.TierNone
	TierProcess   = driver.TierProcess
	TierLandlock  = driver.TierLandlock
	TierNamespace = driver.TierNamespace
	TierContainer = driver.TierContainer
	TierGVisor    = driver.TierGVisor
	TierMicroVM   = driver.TierMicroVM
)

// Control is one control in force and how it is enforced.
type Control = driver.Control

// Limits are the sandbox's resource limits. Zero fields take the defaults
// documented on DefaultLimits; a field the caller sets explicitly must be
// enforced by the backend, or New fails.
type Limits struct {
	// Timeout is the default for each call that runs something.
	Timeout time.Duration
	// MaxTimeout is the largest timeout a call may ask for.
	MaxTimeout time.Duration
	// CPUSeconds limits CPU time (per process or per sandbox, see Info).
	CPUSeconds int
	// MemoryBytes limits memory for the sandbox.
	MemoryBytes int64
	// Pids limits the number of processes.
	Pids int
	// FileSizeBytes limits the size of one file.
	FileSizeBytes int64
	// DiskBytes limits the workspace's total size.
	DiskBytes int64
	// TmpBytes sizes the private /tmp where the backend has one.
	TmpBytes int64
	// OpenFiles limits the file descriptors each process may have open
	// (RLIMIT_NOFILE): opening one more fails with EMFILE ("Too many open
	// files"). 0 leaves the backend's default (1024 on the local backend,
	// the engine's on docker and kubernetes). The in-sandbox agent runs
	// under the same limit on every backend and needs descriptors of its
	// own, so at least MinOpenFiles; with fewer than about 1000 it also
	// runs fewer commands at once (more fail with SBX_BUSY).
	OpenFiles int
	// MaxOutputBytes caps the output kept per stream of each call, at most
	// 8 MiB (the in-sandbox agent's own cap, which bounds its memory); the
	// rest is cut with a marker saying how much was dropped.
	MaxOutputBytes int
}

// DefaultLimits are the limits of a sandbox created without WithLimits.
// Memory and pids defaults are applied where the backend can enforce them
// and reported in Info.
var DefaultLimits = Limits{
	Timeout:        60 * time.Second,
	MaxTimeout:     30 * time.Minute,
	MaxOutputBytes: 1 << 20,
	MemoryBytes:    2 << 30,
	Pids:           512,
	FileSizeBytes:  1 << 30,
	TmpBytes:       512 << 20,
}

// MinOpenFiles is the smallest Limits.OpenFiles New accepts: the agent,
// which runs under the limit too, holds its stream, its pipes to the
// commands it runs and the files it serves.
const MinOpenFiles = 64

// DefaultTTL closes a forgotten sandbox after this long (see Renew).
const DefaultTTL = time.Hour

// Option configures New.
type Option func(*config)

type config struct {
	driver      driver.Driver
	workspace   string
	env         map[string]string
	limits      Limits
	explicit    Limits
	network     bool
	minTier     Tier
	allowWeaker []Tier
	audit       slog.Handler
	ttl         time.Duration
	python      string
	pyImports   []string
	owner       string
	options     map[string]string
	progress    func(string)
	egress      *EgressPolicy
}

// WithDriver selects the backend (default: the local backend).
func WithDriver(d driver.Driver) Option { return func(c *config) { c.driver = d } }

// WithWorkspace uses an existing host directory as the workspace. It is
// kept when the sandbox closes. Without it the sandbox gets a temporary
// workspace that Close removes.
func WithWorkspace(dir string) Option { return func(c *config) { c.workspace = dir } }

// WithEnv adds variables to the sandbox's minimal environment (PATH, HOME,
// LANG, TERM=dumb). The host's environment is never passed.
func WithEnv(env map[string]string) Option {
	return func(c *config) {
		for k, v := range env {
			c.env[k] = v
		}
	}
}

// WithLimits sets resource limits; its non-zero fields override the
// defaults and must be enforced by the backend.
func WithLimits(l Limits) Option { return func(c *config) { c.explicit = l } }

// WithNetwork allows network access. The default is no network, enforced by
// the kernel in every tier that claims it. Info says what is shared.
func WithNetwork() Option { return func(c *config) { c.network = true } }

// RequireIsolation fails New with SBX_ISOLATION_UNAVAILABLE unless the
// backend provides at least tier t.
func RequireIsolation(t Tier) Option { return func(c *config) { c.minTier = t } }

// AllowWeaker accepts the named tiers, weaker than the backend's strong
// default, when nothing better is available (e.g. TierProcess on a machine
// without user namespaces). Nothing weaker than namespace is ever used
// without being named here.
func AllowWeaker(tiers ...Tier) Option {
	return func(c *config) { c.allowWeaker = append(c.allowWeaker, tiers...) }
}

// WithAudit sends an event for every operation to h. There is none by
// default.
func WithAudit(h slog.Handler) Option { return func(c *config) { c.audit = h } }

// WithTTL sets how long the sandbox lives without Renew (default 1 h).
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithPython sets the Python interpreter used by the Python kernel
// (default: python3 on the sandbox's PATH).
func WithPython(path string) Option { return func(c *config) { c.python = path } }

// WithPythonImports makes every Python context of the sandbox start with
// these modules imported (e.g. "numpy", "pandas"), bound in its namespace as
// `import numpy, pandas` binds them, without paying for the imports again:
// the sandbox keeps a template interpreter that imported them once, and
// each new context (the default one too, and a context restarted after its
// process died) is forked from it in a few milliseconds. The template
// starts in the background when the sandbox is created.
//
// The template, one context it keeps forked ahead and one `sleep` process
// are processes of the sandbox like any other: their memory counts against
// Limits.MemoryBytes (forked contexts share the template's pages
// copy-on-write) and they count against Limits.Pids. Each forked context
// stands in for a `sleep` process the sandbox starts for it, so it is
// confined, limited and killed as a context started afresh is; killing
// every sleep in the sandbox ends the forked contexts, which restart on
// their next run (StateLost).
//
// A module that cannot be imported makes the Python call that needed a
// context fail with SBX_UNAVAILABLE naming it (the sandbox stays usable;
// the next context tries again). Forked contexts get fresh random state
// (Python's random, numpy's global generator); what a fork cannot give them
// (the string hash seed, generators created at import time, the address
// layout) is listed in package sandbox/pykernel's documentation.
func WithPythonImports(modules ...string) Option {
	return func(c *config) { c.pyImports = append([]string(nil), modules...) }
}

// WithOwner labels the sandbox with its creator: every audit event carries
// it as the attribute "owner", and the Docker backend labels its containers
// with it (sandboxkit gc --owner removes one owner's leftovers).
func WithOwner(owner string) Option { return func(c *config) { c.owner = owner } }

// WithBackendOption passes a backend-specific setting (e.g. the docker
// image).
func WithBackendOption(key, value string) Option {
	return func(c *config) { c.options[key] = value }
}

// WithProgress receives progress lines during slow creation steps.
func WithProgress(f func(string)) Option { return func(c *config) { c.progress = f } }

// Sandbox is one isolated, stateful place to run code. It is safe for
// concurrent use.
type Sandbox struct {
	// Commands runs one-shot commands and background jobs.
	Commands *Commands
	// Files reads, writes and searches the workspace.
	Files *Files
	// Shells opens live bash sessions that keep state between calls.
	Shells *Shells
	// Python runs code in persistent Python contexts (notebook semantics).
	Python *Python

	id      string
	cfg     config
	inst    driver.Instance
	client  *agent.Client
	iso     driver.Isolation
	hello   wire.HelloReply
	egress  *compiledPolicy
	created time.Time
	env     []string
	logger  *slog.Logger

	mu       sync.Mutex
	closed   bool
	paused   bool
	ttl      *time.Timer
	expires  time.Time
	closeErr error
	closers  []func()
	// closeDone is closed when the first Close has finished, so that a
	// second Close (say, the caller's, while the TTL's runs) returns only
	// once every process is gone.
	closeDone chan struct{}
}

// New creates a sandbox. It fails with SBX_ISOLATION_UNAVAILABLE when the
// backend cannot apply what was asked for.
func New(ctx context.Context, opts ...Option) (*Sandbox, error) {
	c := config{env: map[string]string{}, ttl: DefaultTTL, minTier: TierNone, options: map[string]string{}}
	for _, o := range opts {
		o(&c)
	}
	c.limits = mergeLimits(DefaultLimits, c.explicit)
	if c.driver == nil {
		c.driver = local.New()
	}
	if err := validateLimits(c.explicit); err != nil {
		return nil, err
	}
	if c.limits.MaxTimeout < c.limits.Timeout {
		return nil, newError(CodeInvalidArgument, "New", "Limits.MaxTimeout (%s) is below Limits.Timeout (%s)", c.limits.MaxTimeout, c.limits.Timeout)
	}
	for _, m := range c.pyImports {
		if !validModule(m) {
			return nil, newError(CodeInvalidArgument, "New", "WithPythonImports: %q is not a Python module name (dotted identifiers, e.g. \"numpy\" or \"xml.dom\")", truncateForMessage(m))
		}
	}
	egress, err := c.compileEgress()
	if err != nil {
		return nil, err
	}
	id := newID()
	start := time.Now()
	dcfg := driver.Config{
		ID:        id,
		Workspace: c.workspace,
		Limits: driver.Limits{
			CPUSeconds: c.limits.CPUSeconds, MemoryBytes: c.limits.MemoryBytes, Pids: c.limits.Pids,
			FileSizeBytes: c.limits.FileSizeBytes, DiskBytes: c.limits.DiskBytes, TmpBytes: c.limits.TmpBytes,
			OpenFiles: c.limits.OpenFiles,
		},
		Explicit: driver.Limits{
			CPUSeconds: c.explicit.CPUSeconds, MemoryBytes: c.explicit.MemoryBytes, Pids: c.explicit.Pids,
			FileSizeBytes: c.explicit.FileSizeBytes, DiskBytes: c.explicit.DiskBytes, TmpBytes: c.explicit.TmpBytes,
			OpenFiles: c.explicit.OpenFiles,
		},
		Network:     c.network,
		Egress:      egress != nil,
		MinTier:     c.minTier,
		AllowWeaker: c.allowWeaker,
		Owner:       c.owner,
		Options:     c.options,
		Progress:    c.progress,
	}
	sctx, cancel := context.WithTimeout(ctx, driver.DefaultStartTimeout)
	defer cancel()
	inst, err := c.driver.Start(sctx, dcfg)
	if err != nil {
		return nil, wrapErr("New", err)
	}
	iso := inst.Isolation()
	// Two controls are applied by this layer and the agent on every
	// backend; report them alongside the backend's own.
	iso.Controls = addControl(iso.Controls, Control{Name: "environment", Enforced: true, Mechanism: "minimal environment (PATH, HOME, LANG, TERM and the caller's variables); the host's environment is never passed"})
	iso.Controls = addControl(iso.Controls, Control{Name: "timeout", Enforced: true, Mechanism: fmt.Sprintf("the agent kills the process tree at each call's deadline (default %s, max %s)", c.limits.Timeout, c.limits.MaxTimeout)})
	if err := checkExplicit(c, iso); err != nil {
		inst.Close(context.Background())
		return nil, err
	}
	if egress != nil {
		if err := checkEgressTier(iso); err != nil {
			inst.Close(context.Background())
			return nil, err
		}
		iso.Controls = addControl(iso.Controls, egressControl(egress))
	}
	extra := c.env
	if egress != nil {
		extra = withProxyEnv(extra)
	}
	if t := iso.Extra["tmpdir"]; t != "" && t != "/tmp" {
		// The landlock tier's private temporary directory.
		env := extra
		extra = map[string]string{"TMPDIR": t}
		for k, v := range env {
			extra[k] = v
		}
	}
	env := baseEnv(iso.WorkspacePath, extra)
	rlimits, err := rlimitsFor(iso, c.limits)
	if err != nil {
		inst.Close(context.Background())
		return nil, err
	}
	hello := wire.Hello{
		Workspace:     iso.WorkspacePath,
		Env:           env,
		FileSizeBytes: c.limits.FileSizeBytes,
		DiskBytes:     c.limits.DiskBytes,
		Rlimits:       rlimits,
	}
	if egress != nil {
		hello.Proxy = EgressProxyAddr
		hello.ProxyHandoffPath = handoffPath(inst)
	}
	client, err := agent.Dial(sctx, inst.Conn(), hello)
	if err != nil {
		inst.Close(context.Background())
		return nil, wrapErr("New", err)
	}
	sb := &Sandbox{id: id, cfg: c, inst: inst, client: client, iso: iso, hello: client.Hello(), created: start, env: env, closeDone: make(chan struct{})}
	if c.audit != nil {
		sb.logger = slog.New(c.audit)
		if c.owner != "" {
			// Every event, the egress proxy's too, names whose sandbox it
			// was: one handler often serves many callers.
			sb.logger = sb.logger.With(slog.String("owner", c.owner))
		}
	}
	if egress != nil {
		if err := sb.startEgress(egress); err != nil {
			client.Close()
			inst.Close(context.Background())
			return nil, err
		}
	}
	sb.Commands = &Commands{sb: sb}
	sb.Files = &Files{sb: sb}
	sb.initServices()
	sb.expires = time.Now().Add(c.ttl)
	sb.ttl = time.AfterFunc(c.ttl, func() {
		sb.auditEvent(context.Background(), "Sandbox.TTL", "expired", time.Now(), nil)
		sb.Close()
	})
	sb.auditEvent(ctx, "Sandbox.New", fmt.Sprintf("backend=%s tier=%s", c.driver.Name(), iso.Tier), start, nil)
	if len(c.pyImports) > 0 {
		sb.Python.preload()
	}
	return sb, nil
}

func addControl(cs []Control, c Control) []Control {
	for _, x := range cs {
		if x.Name == c.Name {
			return cs
		}
	}
	return append(slices.Clone(cs), c)
}

// validateLimits refuses limits that cannot mean anything, rather than
// dropping them as zero would be ("no limit set").
func validateLimits(l Limits) error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Timeout", int64(l.Timeout)}, {"MaxTimeout", int64(l.MaxTimeout)}, {"CPUSeconds", int64(l.CPUSeconds)},
		{"MemoryBytes", l.MemoryBytes}, {"Pids", int64(l.Pids)}, {"FileSizeBytes", l.FileSizeBytes},
		{"DiskBytes", l.DiskBytes}, {"TmpBytes", l.TmpBytes}, {"OpenFiles", int64(l.OpenFiles)},
		{"MaxOutputBytes", int64(l.MaxOutputBytes)},
	} {
		if f.v < 0 {
			return newError(CodeInvalidArgument, "New", "Limits.%s is negative (%d): use 0 for the default, or a positive limit", f.name, f.v)
		}
	}
	if l.OpenFiles > 0 && l.OpenFiles < MinOpenFiles {
		return newError(CodeInvalidArgument, "New", "Limits.OpenFiles %d is below MinOpenFiles (%d): the sandbox's agent runs under the same limit and needs descriptors of its own; use at least %d", l.OpenFiles, MinOpenFiles, MinOpenFiles)
	}
	return nil
}

func mergeLimits(def, set Limits) Limits {
	l := def
	if set.Timeout > 0 {
		l.Timeout = set.Timeout
	}
	if set.MaxTimeout > 0 {
		l.MaxTimeout = set.MaxTimeout
	}
	if set.CPUSeconds > 0 {
		l.CPUSeconds = set.CPUSeconds
	}
	if set.MemoryBytes > 0 {
		l.MemoryBytes = set.MemoryBytes
	}
	if set.Pids > 0 {
		l.Pids = set.Pids
	}
	if set.FileSizeBytes > 0 {
		l.FileSizeBytes = set.FileSizeBytes
	}
	if set.DiskBytes > 0 {
		l.DiskBytes = set.DiskBytes
	}
	if set.TmpBytes > 0 {
		l.TmpBytes = set.TmpBytes
	}
	if set.OpenFiles > 0 {
		l.OpenFiles = set.OpenFiles
	}
	if set.MaxOutputBytes > 0 {
		l.MaxOutputBytes = set.MaxOutputBytes
	}
	return l
}

// checkExplicit refuses a sandbox whose backend did not enforce a control
// the caller asked for by name.
func checkExplicit(c config, iso driver.Isolation) error {
	enforced := map[string]driver.Control{}
	for _, ctl := range iso.Controls {
		enforced[ctl.Name] = ctl
	}
	need := func(set bool, name, what string) error {
		if !set {
			return nil
		}
		if ctl, ok := enforced[name]; !ok || !ctl.Enforced {
			how := "it is not reported"
			if ok {
				how = ctl.Mechanism
			}
			return newError(CodeIsolationUnavailable, "New", "the %s tier of this backend cannot enforce the %s limit that was asked for (%s); drop that limit or use a stronger tier", iso.Tier, what, how)
		}
		return nil
	}
	l := c.explicit
	// Choosing a tier weaker than namespace by name (AllowWeaker) is the
	// caller's acceptance of that tier's documented gaps, no network
	// isolation included; explicit limits are still refused if unenforced.
	netOK := !c.network && iso.Tier < TierLandlock && slices.Contains(c.allowWeaker, iso.Tier)
	for _, e := range []error{
		need(l.CPUSeconds > 0, "cpu", "CPU"),
		need(l.MemoryBytes > 0, "memory", "memory"),
		need(l.Pids > 0, "pids", "pids"),
		need(l.FileSizeBytes > 0, "file_size", "file size"),
		need(l.DiskBytes > 0, "disk", "disk quota"),
		need(l.OpenFiles > 0, "open_files", "open files"),
		need(!c.network && !netOK, "network", "no-network"),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// rlimitResources are the Linux numbers of the rlimits the agent can set
// on its children (the same on amd64 and arm64), and the limit each takes
// its value from.
var rlimitResources = map[driver.Rlimit]struct {
	resource int
	value    func(Limits) int64
}{
	driver.RlimitCPU:    {0, func(l Limits) int64 { return int64(l.CPUSeconds) }},
	driver.RlimitFSIZE:  {1, func(l Limits) int64 { return l.FileSizeBytes }},
	driver.RlimitNPROC:  {6, func(l Limits) int64 { return int64(l.Pids) }},
	driver.RlimitNOFILE: {7, func(l Limits) int64 { return int64(l.OpenFiles) }},
	driver.RlimitAS:     {9, func(l Limits) int64 { return l.MemoryBytes }},
}

// rlimitsFor asks the agent to set, on every process it starts, the
// rlimits of the controls the backend leaves to it (Control.SetByAgent):
// the control's Rlimit field decides, never its Mechanism words, which
// are for people and change with them. A control the backend reports as
// enforced by an rlimit this layer cannot set is an error: it would be
// reported but not in force.
func rlimitsFor(iso driver.Isolation, l Limits) ([]wire.Rlimit, error) {
	var out []wire.Rlimit
	for _, ctl := range iso.Controls {
		if !ctl.Enforced || !ctl.SetByAgent {
			continue
		}
		r, ok := rlimitResources[ctl.Rlimit]
		if !ok {
			return nil, newError(CodeInternal, "New", "the backend reports the %s control as enforced by the agent setting %q, which is not a resource limit the agent sets (a bug in the backend)", ctl.Name, ctl.Rlimit)
		}
		v := r.value(l)
		if v <= 0 {
			continue
		}
		hard := uint64(v)
		if ctl.Rlimit == driver.RlimitCPU {
			// SIGXCPU at the soft limit, SIGKILL a second later for
			// a process that catches it.
			hard++
		}
		out = append(out, wire.Rlimit{Resource: r.resource, Name: string(ctl.Rlimit), Soft: uint64(v), Hard: hard})
	}
	return out, nil
}

// baseEnv is the whole environment of the sandbox's processes: a minimal
// set plus what the caller added. Nothing comes from the host.
func baseEnv(workspace string, extra map[string]string) []string {
	m := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": workspace,
		"LANG": "C.UTF-8",
		"TERM": "dumb",
	}
	for k, v := range extra {
		m[k] = v
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sbx-" + hex.EncodeToString(b[:])
}

// ID returns the sandbox's unique id.
func (sb *Sandbox) ID() string { return sb.id }

// Info describes a sandbox and what is really in force.
type Info struct {
	// ID is the sandbox's id (as ID returns).
	ID string
	// Backend names the backend, e.g. "local" or "docker".
	Backend string
	// Isolation is the tier in force, measured at creation.
	Isolation Tier
	// Controls lists each control and the mechanism enforcing it.
	Controls []Control
	// Gaps lists known weaknesses of this tier on this machine.
	Gaps []string
	// Limits are the limits in force, defaults filled in.
	Limits Limits
	// Network reports whether network access was allowed.
	Network bool
	// Egress reports the egress policy in force (WithEgress), nil when
	// there is none.
	Egress *EgressInfo
	// Workspace is the workspace path as processes inside see it.
	Workspace string
	// HostWorkspace is the workspace on the host ("" if not reachable).
	HostWorkspace string
	// Python is the path of python3 inside the sandbox, "" if none.
	Python string
	// PythonAvailable reports whether a Python interpreter was found.
	PythonAvailable bool
	// Bash is the path of bash inside the sandbox, "" if none.
	Bash string
	// Created is when the sandbox was made; Expires when its TTL ends it
	// (Renew pushes it back).
	Created time.Time
	Expires time.Time
	// Paused and Closed report the sandbox's state.
	Paused bool
	Closed bool
	// Extra holds backend facts (container id, image, cgroup).
	Extra map[string]string
}

// Info reports the sandbox's backend, isolation and limits.
func (sb *Sandbox) Info() Info {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	py := sb.cfg.python
	if py == "" {
		py = sb.hello.Python
	}
	return Info{
		ID: sb.id, Backend: sb.cfg.driver.Name(), Isolation: sb.iso.Tier,
		Controls: slices.Clone(sb.iso.Controls), Gaps: slices.Clone(sb.iso.Gaps), Limits: sb.cfg.limits,
		Network: sb.cfg.network, Egress: sb.egressInfo(), Workspace: sb.iso.WorkspacePath, HostWorkspace: sb.iso.HostWorkspace,
		Python: py, PythonAvailable: py != "", Bash: sb.hello.Bash,
		Created: sb.created, Expires: sb.expires, Paused: sb.paused, Closed: sb.closed, Extra: sb.iso.Extra,
	}
}

// Renew pushes the TTL back to a full period from now. It fails on a
// closed sandbox.
func (sb *Sandbox) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return wrapErr("Sandbox.Renew", err)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.closed {
		return newError(CodeClosed, "Sandbox.Renew", "the sandbox is closed")
	}
	sb.ttl.Reset(sb.cfg.ttl)
	sb.expires = time.Now().Add(sb.cfg.ttl)
	return nil
}

// Pause freezes every process in the sandbox. While paused, calls fail
// with SBX_PAUSED (nothing is queued); Resume continues the processes
// where they stopped. Pausing is optional for a backend (driver.Pauser):
// the local, docker and kubernetes backends pause; on a backend that
// cannot, Pause fails with SBX_UNSUPPORTED and the sandbox keeps running.
func (sb *Sandbox) Pause(ctx context.Context) error {
	start := time.Now()
	if err := sb.check("Sandbox.Pause"); err != nil {
		return err
	}
	p, ok := sb.inst.(driver.Pauser)
	if !ok {
		err := newError(CodeUnsupported, "Sandbox.Pause", "the %s backend cannot pause a sandbox (it does not implement driver.Pauser); the sandbox keeps running", sb.cfg.driver.Name())
		sb.auditEvent(ctx, "Sandbox.Pause", "", start, err)
		return err
	}
	err := p.Pause(ctx)
	if err == nil {
		sb.mu.Lock()
		sb.paused = true
		sb.mu.Unlock()
	}
	err = wrapErr("Sandbox.Pause", err)
	sb.auditEvent(ctx, "Sandbox.Pause", "", start, err)
	return err
}

// Resume thaws a paused sandbox. On a backend that cannot pause it fails
// with SBX_UNSUPPORTED, as Pause does.
func (sb *Sandbox) Resume(ctx context.Context) error {
	start := time.Now()
	sb.mu.Lock()
	closed := sb.closed
	sb.mu.Unlock()
	if closed {
		return newError(CodeClosed, "Sandbox.Resume", "the sandbox is closed")
	}
	p, ok := sb.inst.(driver.Pauser)
	if !ok {
		err := newError(CodeUnsupported, "Sandbox.Resume", "the %s backend cannot pause a sandbox (it does not implement driver.Pauser), so there is nothing to resume", sb.cfg.driver.Name())
		sb.auditEvent(ctx, "Sandbox.Resume", "", start, err)
		return err
	}
	err := p.Resume(ctx)
	if err == nil {
		sb.mu.Lock()
		sb.paused = false
		sb.mu.Unlock()
	}
	err = wrapErr("Sandbox.Resume", err)
	sb.auditEvent(ctx, "Sandbox.Resume", "", start, err)
	return err
}

// Close ends every process in the sandbox and releases it; a temporary
// workspace is removed, a caller's workspace is kept. It is idempotent: a
// later or concurrent call waits for the first to finish and returns its
// result.
func (sb *Sandbox) Close() error {
	sb.mu.Lock()
	if sb.closed {
		sb.mu.Unlock()
		<-sb.closeDone
		sb.mu.Lock()
		defer sb.mu.Unlock()
		return sb.closeErr
	}
	sb.closed = true
	sb.ttl.Stop()
	closers := sb.closers
	sb.closers = nil
	sb.mu.Unlock()
	start := time.Now()
	// The stream first: closing it ends every call and every write
	// blocked on it. The egress proxy's cleanup (a closer) waits for its
	// connections' writers, and with connections carried over the stream
	// (an engine reached over TCP, Kubernetes) an agent that stopped
	// reading, stalled or hostile, left those writers blocked for good:
	// Close hung and the container stayed (TestCloseEndsAStalledStreamCarryingEgress).
	sb.client.Close()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	err := sb.inst.Close(context.Background())
	err = wrapErr("Sandbox.Close", err)
	sb.mu.Lock()
	sb.closeErr = err
	sb.mu.Unlock()
	close(sb.closeDone)
	sb.auditEvent(context.Background(), "Sandbox.Close", "", start, err)
	return err
}

// onClose registers cleanup run by Close after the agent's stream is
// closed and before the backend ends the sandbox.
func (sb *Sandbox) onClose(f func()) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.closers = append(sb.closers, f)
}

// check returns the error for a call on a closed, dead or paused sandbox.
func (sb *Sandbox) check(op string) error {
	sb.mu.Lock()
	closed, paused := sb.closed, sb.paused
	sb.mu.Unlock()
	if closed {
		return newError(CodeClosed, op, "the sandbox is closed; create a new one")
	}
	if err := sb.client.Err(); err != nil {
		return wrapErr(op, err)
	}
	if paused {
		return newError(CodePaused, op, "the sandbox is paused; call Resume first")
	}
	return nil
}

func (sb *Sandbox) auditEvent(ctx context.Context, op, summary string, start time.Time, err error) {
	if sb.logger == nil {
		return
	}
	outcome, code := "ok", ""
	level := slog.LevelInfo
	if err != nil {
		outcome, code = "error", string(CodeOf(err))
		level = slog.LevelWarn
	}
	if len(summary) > 200 {
		summary = summary[:200] + "…"
	}
	sb.logger.LogAttrs(ctx, level, "sandbox operation",
		slog.String("sandbox", sb.id), slog.String("op", op), slog.String("args", summary),
		slog.String("outcome", outcome), slog.Duration("duration", time.Since(start)), slog.String("code", code))
}

// timeoutFor returns the timeout for a call, or an error when it passes
// the maximum.
func (sb *Sandbox) timeoutFor(op string, d time.Duration) (time.Duration, error) {
	if d < 0 {
		return 0, newError(CodeInvalidArgument, op, "timeout %s is negative", d)
	}
	if d == 0 {
		return sb.cfg.limits.Timeout, nil
	}
	if d > sb.cfg.limits.MaxTimeout {
		return 0, newError(CodeInvalidArgument, op, "timeout %s is over the sandbox's maximum of %s: use a shorter timeout, or a background job for long work", d, sb.cfg.limits.MaxTimeout)
	}
	return d, nil
}
