package fake

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	agentserver "github.com/sandboxkit/sandboxkit/sandbox/agent/server"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// WorkspacePath is where the fake sandbox's workspace appears to be, as
// Info().Workspace and absolute paths see it. The files are in a
// temporary directory of the host (Info().HostWorkspace), removed when
// the test ends.
const WorkspacePath = "/workspace"

// Fake is the test's handle on a fake sandbox: the Script that answers
// calls, the Clock its timeouts run on, the Workspace, and the record of
// every call.
type Fake struct {
	// Script holds the rules answering commands, Python cells and shell
	// commands. Add rules before the code under test runs (or between
	// its calls); unanswered calls fail as described in the package doc.
	Script *Script
	// Clock is the fake sandbox's time: command timeouts run on it, and
	// a hanging command moves it to its deadline at once (see Clock).
	Clock *Clock

	cfg    config
	dir    string // the workspace on the host
	rec    recorder
	limits sandbox.Limits

	mu      sync.Mutex
	network bool
	tier    sandbox.Tier
	env     []string // the sandbox's base environment, from the handshake
	missing []string
	lastPID int

	// The Workspace's own connection to an agent server on dir.
	wsOnce   sync.Once
	wsClient *agent.Client
	wsErr    error
}

// Option configures New.
type Option func(*config)

type config struct {
	sandboxOpts     []sandbox.Option
	tier            sandbox.Tier
	noPython        bool
	noBash          bool
	allowUnscripted bool
}

// WithSandboxOptions passes options to sandbox.New (limits, network,
// environment, audit, ...), so the policy the code under test would set
// is the one recorded with each call.
func WithSandboxOptions(opts ...sandbox.Option) Option {
	return func(c *config) { c.sandboxOpts = append(c.sandboxOpts, opts...) }
}

// ReportTier makes the fake report isolation tier t in Info (default
// TierNone: nothing is isolated because nothing runs). Use it when the
// code under test asks for a tier with sandbox.RequireIsolation.
func ReportTier(t sandbox.Tier) Option { return func(c *config) { c.tier = t } }

// WithoutPython makes the sandbox report that python3 is missing, so
// Python calls fail with SBX_UNAVAILABLE as on an image without it.
func WithoutPython() Option { return func(c *config) { c.noPython = true } }

// WithoutBash makes the sandbox report that bash is missing, so
// Shells.Open fails with SBX_UNAVAILABLE.
func WithoutBash() Option { return func(c *config) { c.noBash = true } }

// AllowUnscripted stops New from failing the test at its end when a call
// found no rule in the script (the call itself still fails as usual).
// Use it in tests of how code copes with such failures.
func AllowUnscripted() Option { return func(c *config) { c.allowUnscripted = true } }

// New creates a fake sandbox for the test t and returns it with its
// handle. The sandbox is a real *sandbox.Sandbox (the built-in tools and
// every service work on it unchanged) served by the real agent server on
// a temporary directory, with a script in place of processes: see the
// package doc. It is closed, and its directory removed, when the test
// ends; if any call found no rule in the script, the test then fails with
// the list of those calls and how to script them (unless AllowUnscripted).
func New(t testing.TB, opts ...Option) (*sandbox.Sandbox, *Fake) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandboxkit-fake-")
	if err != nil {
		t.Fatalf("fake.New: a directory for the workspace: %v", err)
	}
	fk := &Fake{Script: &Script{}, Clock: newClock(time.Now()), dir: dir}
	for _, o := range opts {
		o(&fk.cfg)
	}
	fk.tier = fk.cfg.tier
	sopts := append([]sandbox.Option{sandbox.WithDriver(&fakeDriver{fk: fk})}, fk.cfg.sandboxOpts...)
	sb, err := sandbox.New(context.Background(), sopts...)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("fake.New: %v", err)
	}
	info := sb.Info()
	fk.mu.Lock()
	fk.limits = info.Limits
	fk.mu.Unlock()
	t.Cleanup(func() {
		_ = sb.Close()
		if fk.wsClient != nil {
			fk.wsClient.Close()
		}
		os.RemoveAll(dir)
		fk.mu.Lock()
		missing := slices.Clone(fk.missing)
		fk.mu.Unlock()
		if len(missing) > 0 && !fk.cfg.allowUnscripted {
			t.Errorf("the fake sandbox received %d call(s) that no rule of its script answers:\n  %s", len(missing), strings.Join(missing, "\n  "))
		}
	})
	return sb, fk
}

// Workspace returns the workspace, for the test to prepare and check
// files.
func (fk *Fake) Workspace() *Workspace { return &Workspace{fk: fk} }

// Calls returns every call recorded so far, oldest first.
func (fk *Fake) Calls() []Call { return fk.rec.all() }

// CallsOf returns the recorded calls of one kind, oldest first.
func (fk *Fake) CallsOf(k Kind) []Call {
	var out []Call
	for _, c := range fk.rec.all() {
		if c.Kind == k {
			out = append(out, c)
		}
	}
	return out
}

// Unscripted returns the messages of the calls no rule answered.
func (fk *Fake) Unscripted() []string {
	fk.mu.Lock()
	defer fk.mu.Unlock()
	return slices.Clone(fk.missing)
}

func (fk *Fake) unscripted(msg string) {
	fk.mu.Lock()
	defer fk.mu.Unlock()
	fk.missing = append(fk.missing, msg)
}

// policy is what is in force for a call with the given timeout and
// environment: env is the whole environment a process gets (the server
// merges the call's variables into the sandbox's), nil for a call that
// starts none, which the sandbox's own environment stands for.
func (fk *Fake) policy(timeout time.Duration, env []string) Policy {
	fk.mu.Lock()
	defer fk.mu.Unlock()
	if env == nil {
		env = fk.env
	}
	return Policy{Network: fk.network, Isolation: fk.tier, Limits: fk.limits, Timeout: timeout, Env: slices.Clone(env)}
}

// relDir turns a process's working directory (under the host directory)
// into the workspace-relative form Exec.Dir has ("." for the workspace).
func (fk *Fake) relDir(dir string) string {
	rel, err := filepath.Rel(fk.dir, dir)
	if err != nil || rel == ".." || len(rel) > 2 && rel[:3] == ".."+string(filepath.Separator) {
		return "."
	}
	return filepath.ToSlash(rel)
}

// observe records the file and job calls the agent server receives (the
// runner records commands, Python cells and session commands, which it
// answers). It runs on the server's request loop.
func (fk *Fake) observe(op string, args json.RawMessage) func(*wire.WireError) {
	kind := KindFile
	switch {
	case strings.HasPrefix(op, "job."):
		kind = KindJob
	case !strings.HasPrefix(op, "fs."):
		return nil // exec (recorded by the runner), ping
	}
	var a struct {
		Path, From, To, Pattern, ID string
	}
	_ = json.Unmarshal(args, &a)
	c := Call{Kind: kind, Op: op, Text: a.Path, Scripted: true, Policy: fk.policy(0, nil)}
	switch {
	case kind == KindJob:
		c.Text = a.ID
	case op == "fs.move" || op == "fs.copy":
		c.Text, c.Args = a.From, []string{a.From, a.To}
	case op == "fs.search" || op == "fs.glob":
		c.Text, c.Args = a.Pattern, []string{a.Pattern, a.Path}
	}
	idx := fk.rec.add(fk.Clock, c)
	return func(e *wire.WireError) {
		if e != nil {
			fk.rec.setErr(idx, string(e.Code))
		}
	}
}

// serve runs the agent server for one sandbox on conn.
func (fk *Fake) serve(conn io.ReadWriteCloser) error {
	return agentserver.Serve(conn, agentserver.ServeOptions{
		WorkspaceDir: fk.dir,
		Observe:      fk.observe,
		Clock:        fk.Clock,
		Runner:       newScriptRunner(fk),
	})
}

// dialWorkspace connects the Workspace to an agent server of its own on
// the workspace directory (its calls are not the code under test's, so
// they are not recorded).
func (fk *Fake) dialWorkspace() (*agent.Client, error) {
	host, guest := net.Pipe()
	go func() {
		_ = agentserver.Serve(guest, agentserver.ServeOptions{WorkspaceDir: fk.dir, Runner: newScriptRunner(fk)})
	}()
	fk.mu.Lock()
	h := wire.Hello{Version: wire.Version, Workspace: WorkspacePath, Env: fk.env, FileSizeBytes: fk.limits.FileSizeBytes, DiskBytes: fk.limits.DiskBytes}
	fk.mu.Unlock()
	c, err := agent.Dial(context.Background(), host, h)
	if err != nil {
		host.Close()
		return nil, err
	}
	return c, nil
}

// fakeDriver is the backend: its instance's stream leads to the agent
// server in this process.
type fakeDriver struct{ fk *Fake }

func (d *fakeDriver) Name() string { return "fake" }

func (d *fakeDriver) Start(ctx context.Context, cfg driver.Config) (driver.Instance, error) {
	fk := d.fk
	if fk.tier < cfg.MinTier {
		return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, "the fake sandbox reports tier "+fk.tier.String()+", below the required "+cfg.MinTier.String()+": create it with fake.ReportTier")
	}
	fk.mu.Lock()
	fk.network = cfg.Network
	fk.mu.Unlock()
	host, guest := net.Pipe()
	inst := &instance{conn: host, done: make(chan struct{}), tier: fk.tier, cfg: cfg, dir: fk.dir}
	go func() {
		defer close(inst.done)
		_ = fk.serve(guest)
	}()
	return inst, nil
}

type instance struct {
	conn net.Conn
	done chan struct{}
	tier sandbox.Tier
	cfg  driver.Config
	dir  string
	once sync.Once
}

func (i *instance) Conn() io.ReadWriteCloser { return i.conn }

func (i *instance) Isolation() driver.Isolation {
	how := "fake backend: commands are answered from a script, so nothing can reach the network"
	if i.cfg.Network {
		how = "allowed (recorded; the fake backend runs no process)"
	}
	controls := []driver.Control{
		{Name: "network", Enforced: !i.cfg.Network, Mechanism: how},
		{Name: "filesystem", Enforced: true, Mechanism: "the agent's workspace on a temporary directory (os.Root); scripted commands reach files only through Exec.Workspace"},
	}
	l := i.cfg.Limits
	for _, c := range []struct {
		name string
		set  bool
	}{{"cpu", l.CPUSeconds > 0}, {"memory", l.MemoryBytes > 0}, {"pids", l.Pids > 0}, {"open_files", l.OpenFiles > 0}} {
		if c.set {
			controls = append(controls, driver.Control{Name: c.name, Enforced: true, Mechanism: "recorded in each call's Policy (the fake backend runs no process)"})
		}
	}
	if l.FileSizeBytes > 0 {
		controls = append(controls, driver.Control{Name: "file_size", Enforced: true, Mechanism: "checked by the agent's workspace on every write through the file API"})
	}
	if l.DiskBytes > 0 {
		controls = append(controls, driver.Control{Name: "disk", Enforced: true, Mechanism: "checked by the agent's workspace on every write through the file API"})
	}
	return driver.Isolation{Tier: i.tier, Controls: controls, WorkspacePath: WorkspacePath, HostWorkspace: i.dir,
		Gaps: []string{"fake backend for tests: commands, Python and shells are answered from a script, not run"}}
}

func (i *instance) Pause(context.Context) error  { return nil }
func (i *instance) Resume(context.Context) error { return nil }

func (i *instance) Close(context.Context) error {
	i.once.Do(func() { i.conn.Close() })
	<-i.done
	return nil
}

func (i *instance) Done() <-chan struct{} { return i.done }
