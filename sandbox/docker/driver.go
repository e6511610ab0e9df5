package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// DefaultImage is the image a sandbox runs when none is chosen. It is pulled
// when the engine does not have it (see PullPolicy).
const DefaultImage = "python:3.12-slim"

// DefaultUser is the unprivileged uid:gid processes in the container run as
// (nobody:nogroup on Debian; numeric, so the image needs no passwd entry).
const DefaultUser = "65534:65534"

// Sizes used when the sandbox's limits leave them open. tmpfs pages count
// against the memory limit (docs/isolation.md, pitfall 6), so they are kept modest.
const (
	defaultTmpBytes       = 256 << 20
	defaultWorkspaceBytes = 1 << 30
	defaultShmBytes       = 64 << 20
)

// Paths inside the container.
const (
	workspacePath = "/workspace"
	agentDir      = "/.sandboxkit"
	agentPath     = agentDir + "/agent"
)

// Option keys understood in driver.Config.Options; each overrides the
// matching With... option of the driver for one sandbox.
const (
	OptImage   = "image"   // image reference
	OptRuntime = "runtime" // OCI runtime name, e.g. "runsc"
	OptPull    = "pull"    // "missing" (default), "never" or "always"
	OptUser    = "user"    // numeric "uid:gid"
	OptAgent   = "agent"   // path of a static agent binary
	OptCPUs    = "cpus"    // CPU rate limit, e.g. "1.5" (cgroup CFS quota)
)

// PullPolicy says when Start pulls the image.
type PullPolicy string

// Pull policies.
const (
	PullMissing PullPolicy = "missing" // pull only when the engine lacks the image
	PullNever   PullPolicy = "never"   // never pull; a missing image is an error
	PullAlways  PullPolicy = "always"  // pull before every sandbox (to pick up updates)
)

// Option configures a Driver.
type Option func(*settings)

type settings struct {
	image     string
	runtime   string
	pull      PullPolicy
	user      string
	agentPath string
	cpus      string
	host      string
	context   string
	wsEngine  bool
	cli       *client.Client
}

// WithImage sets the image sandboxes run (default DefaultImage).
func WithImage(ref string) Option { return func(s *settings) { s.image = ref } }

// WithRuntime selects the engine's OCI runtime by name. "runsc" (gVisor)
// reports the gvisor tier; any other runtime reports container.
func WithRuntime(name string) Option { return func(s *settings) { s.runtime = name } }

// WithPull sets when images are pulled (default PullMissing).
func WithPull(p PullPolicy) Option { return func(s *settings) { s.pull = p } }

// WithUser sets the numeric "uid:gid" processes run as (default
// DefaultUser, or the owner of a host workspace directory when that owner
// is not root). "0:0" runs as root inside the container (still without
// capabilities) and is reported as a gap.
func WithUser(uidgid string) Option { return func(s *settings) { s.user = uidgid } }

// WithAgentBinary sets the static Linux agent binary copied into every
// container (see the package doc for how one is found otherwise).
func WithAgentBinary(path string) Option { return func(s *settings) { s.agentPath = path } }

// WithCPUs limits the container's CPU rate (e.g. 1.5 CPUs); 0 = no limit.
func WithCPUs(cpus float64) Option {
	return func(s *settings) { s.cpus = strconv.FormatFloat(cpus, 'f', -1, 64) }
}

// WithHost connects to the engine at host (e.g. "unix:///run/docker.sock",
// "tcp://10.0.0.2:2376", "ssh://user@build-box") instead of the one the
// environment names. Without it the engine is found as the docker CLI
// finds it: $DOCKER_HOST, else $DOCKER_CONTEXT, else the CLI's current
// context (`docker context use`), else the default socket. An ssh:// host
// runs `ssh HOST docker system dial-stdio`, like the CLI: the engine's
// machine needs the docker CLI, and ssh its usual configuration (keys,
// known hosts).
func WithHost(host string) Option { return func(s *settings) { s.host = host } }

// WithContext connects to the engine of the docker CLI context name (as
// `docker --context NAME`), read from the CLI's context store in
// $DOCKER_CONFIG or ~/.docker.
func WithContext(name string) Option { return func(s *settings) { s.context = name } }

// WithWorkspaceOnEngine says that a host workspace path
// (sandbox.WithWorkspace) names a directory on the Docker engine's
// machine. An engine reached other than through a local socket (tcp://,
// ssh://, a context) may run on another machine, where the path would name
// a different directory or none, so a host workspace is refused with such
// an engine unless this option is given; Info then names the workspace as
// a path on the engine's machine, not on this one.
func WithWorkspaceOnEngine() Option { return func(s *settings) { s.wsEngine = true } }

// WithClient uses an existing engine client; the Driver does not close it.
func WithClient(c *client.Client) Option { return func(s *settings) { s.cli = c } }

// Driver starts sandboxes as Docker containers. It is a driver.Driver; use
// it with sandbox.WithDriver. It is safe for concurrent use.
type Driver struct {
	s       settings
	cli     *client.Client
	cliErr  error
	ownsCli bool

	mu      sync.Mutex
	engine  *engineFacts             // nil until the engine answered once
	volumes map[string]bool          // agent volumes known to be filled
	volMu   sync.Mutex               // serialises filling agent volumes
	target  engineTarget             // how the engine is reached
	checks  map[string]*runtimeCheck // runtimes measured (measure.go), by runtime and image

	// as overrides the creator recorded on containers (tests: a process
	// that is gone, another machine); nil means this process.
	as *identity
}

// creator is the identity recorded on the containers this driver makes.
func (d *Driver) creator() identity {
	if d.as != nil {
		return *d.as
	}
	return creator()
}

// engineFacts are what the backend learns from the engine once.
type engineFacts struct {
	arch     string // GOARCH of the engine's machine
	os       string
	version  string // engine version
	api      string // negotiated API version
	runtimes map[string]bool
	seccomp  bool
	cgroup   string
}

// New returns a Docker driver. It does not contact the engine: an
// unreachable engine is reported by Start, with code BACKEND.
func New(opts ...Option) *Driver {
	d := &Driver{s: settings{image: DefaultImage, pull: PullMissing}, volumes: map[string]bool{}}
	for _, o := range opts {
		o(&d.s)
	}
	if d.s.cli != nil {
		d.cli = d.s.cli
		d.target = engineTarget{where: d.cli.DaemonHost(), local: isSocket(d.cli.DaemonHost())}
		return d
	}
	d.target, d.cliErr = resolveEngine(d.s)
	if d.cliErr != nil {
		return d
	}
	d.cli, d.cliErr = client.NewClientWithOpts(d.target.opts...)
	d.ownsCli = d.cliErr == nil
	return d
}

// Name returns "docker".
func (d *Driver) Name() string { return "docker" }

// Client returns the engine client the driver uses (for tests and tools
// that need the engine directly, e.g. a benchmark against docker exec).
func (d *Driver) Client() (*client.Client, error) {
	if d.cliErr != nil {
		return nil, d.engineError("connecting to the Docker engine", d.cliErr)
	}
	return d.cli, nil
}

// Close releases the driver's connections to the engine. Sandboxes already
// started keep running until they are closed.
func (d *Driver) Close() error {
	if d.ownsCli {
		return d.cli.Close()
	}
	return nil
}

// facts returns what the engine told about itself, asking it on first use.
func (d *Driver) facts(ctx context.Context) (*engineFacts, error) {
	if d.cliErr != nil {
		return nil, driver.Errorf(driver.CodeBackend, d.cliErr, "cannot configure the Docker client (check DOCKER_HOST, DOCKER_CERT_PATH)")
	}
	d.mu.Lock()
	f := d.engine
	d.mu.Unlock()
	if f != nil {
		return f, nil
	}
	if _, err := d.cli.Ping(ctx); err != nil {
		return nil, d.engineError("connecting to the Docker engine", err)
	}
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return nil, d.engineError("asking the Docker engine for its version", err)
	}
	info, err := d.cli.Info(ctx)
	if err != nil {
		return nil, d.engineError("asking the Docker engine for its configuration", err)
	}
	f = &engineFacts{
		arch: v.Arch, os: v.Os, version: v.Version, api: d.cli.ClientVersion(),
		runtimes: map[string]bool{}, cgroup: info.CgroupVersion,
	}
	for name := range info.Runtimes {
		f.runtimes[name] = true
	}
	for _, o := range info.SecurityOptions {
		if strings.Contains(o, "name=seccomp") && !strings.Contains(o, "profile=unconfined") {
			f.seccomp = true
		}
	}
	if f.os != "linux" {
		return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
			"the Docker engine runs %s containers; sandboxkit needs a Linux engine", f.os))
	}
	d.mu.Lock()
	d.engine = f
	d.mu.Unlock()
	return f, nil
}

// plan is one sandbox's resolved settings.
type plan struct {
	cfg      driver.Config
	name     string
	image    string
	runtime  string
	pull     PullPolicy
	uid, gid int
	user     string
	agent    string
	nanoCPUs int64
	tier     driver.Tier
	seccomp  string // JSON profile sent with the container, "" for the engine's default
	creator  identity
}

var (
	uidGidRE = regexp.MustCompile(`^([0-9]{1,10}):([0-9]{1,10})$`)
	nameRE   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$`)
)

// resolve merges the driver's settings with cfg.Options and validates them,
// so that bad input fails before anything is created on the engine.
func (d *Driver) resolve(cfg driver.Config) (*plan, error) {
	p := &plan{cfg: cfg, image: d.s.image, runtime: d.s.runtime, pull: d.s.pull,
		user: d.s.user, agent: d.s.agentPath, creator: d.creator()}
	cpus := d.s.cpus
	for k, v := range cfg.Options {
		switch k {
		case OptImage:
			p.image = v
		case OptRuntime:
			p.runtime = v
		case OptPull:
			p.pull = PullPolicy(v)
		case OptUser:
			p.user = v
		case OptAgent:
			p.agent = v
		case OptCPUs:
			cpus = v
		default:
			return nil, driver.Errorf(driver.CodeInvalidArgument, nil, fmt.Sprintf(
				"unknown docker option %q; known: %s, %s, %s, %s, %s, %s", k, OptImage, OptRuntime, OptPull, OptUser, OptAgent, OptCPUs))
		}
	}
	if p.image == "" {
		return nil, driver.Errorf(driver.CodeInvalidArgument, nil, "docker image is empty; pass an image reference such as "+DefaultImage)
	}
	switch p.pull {
	case PullMissing, PullNever, PullAlways:
	default:
		return nil, driver.Errorf(driver.CodeInvalidArgument, nil, fmt.Sprintf("docker pull policy %q is not one of missing, never, always", p.pull))
	}
	if p.user == "" {
		p.user = DefaultUser
		if d.target.local {
			p.user = defaultUser(cfg.Workspace)
		}
	}
	m := uidGidRE.FindStringSubmatch(p.user)
	if m == nil {
		return nil, driver.Errorf(driver.CodeInvalidArgument, nil, fmt.Sprintf("docker user %q must be numeric uid:gid, e.g. %s", p.user, DefaultUser))
	}
	p.uid, _ = strconv.Atoi(m[1])
	p.gid, _ = strconv.Atoi(m[2])
	if cpus != "" {
		f, err := strconv.ParseFloat(cpus, 64)
		if err != nil || f < 0 || f > 1024 {
			return nil, driver.Errorf(driver.CodeInvalidArgument, err, fmt.Sprintf("docker cpus %q must be a number of CPUs such as 1.5", cpus))
		}
		p.nanoCPUs = int64(f * 1e9)
	}
	if cfg.ID == "" {
		p.cfg.ID = randHex(8)
	}
	p.name = "sandboxkit-" + p.cfg.ID
	if !nameRE.MatchString(p.name) {
		return nil, driver.Errorf(driver.CodeInvalidArgument, nil, fmt.Sprintf(
			"sandbox id %q cannot name a container: use letters, digits, '_', '.', '-' (at most 90)", cfg.ID))
	}
	if cfg.Workspace != "" && !d.target.local && !d.s.wsEngine {
		return nil, driver.Errorf(driver.CodeInvalidArgument, nil, fmt.Sprintf(
			"the Docker engine at %s may run on another machine, where the workspace %s would be that machine's directory of the name (or none); "+
				"if the directory exists on the engine's machine, say so with docker.WithWorkspaceOnEngine(); else leave the workspace empty (a tmpfs workspace in the container) and copy files in and out",
			d.target.where, cfg.Workspace))
	}
	if cfg.Workspace != "" && cfg.Limits.DiskBytes > 0 {
		return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil,
			"the docker backend cannot enforce a disk quota on a host workspace directory; leave Workspace empty (a tmpfs workspace sized by the quota) or set no disk limit")
	}
	if cfg.Workspace != "" && d.target.local {
		// Only here can the directory be looked at; on the engine's
		// machine a missing one fails the container's creation.
		if err := checkHostWorkspace(cfg.Workspace, p.uid, p.gid); err != nil {
			return nil, err
		}
	}
	p.tier = tierOf(p.runtime)
	if p.tier < cfg.MinTier {
		return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
			"the docker backend with runtime %q gives tier %s, below the required %s; use the runsc runtime (gVisor) or another backend",
			runtimeName(p.runtime), p.tier, cfg.MinTier))
	}
	return p, nil
}

// defaultUser is DefaultUser, or for a host workspace its owner when that
// is an unprivileged user: then the sandbox writes the files as their
// owner and the host sees them with the right ownership.
func defaultUser(workspace string) string {
	if workspace == "" {
		return DefaultUser
	}
	st, err := os.Stat(workspace)
	if err != nil {
		return DefaultUser
	}
	if uid, gid, ok := fileOwner(st); ok && uid != 0 {
		return fmt.Sprintf("%d:%d", uid, gid)
	}
	return DefaultUser
}

func runtimeName(r string) string {
	if r == "" {
		return "default"
	}
	return r
}

// Start creates the sandbox's container with the agent's volume mounted,
// attaches to its stdio and starts it, pulling the image first when the
// pull policy allows. On any failure nothing is left on the engine.
func (d *Driver) Start(ctx context.Context, cfg driver.Config) (driver.Instance, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, driver.DefaultStartTimeout)
		defer cancel()
	}
	p, err := d.resolve(cfg)
	if err != nil {
		return nil, err
	}
	f, err := d.facts(ctx)
	if err != nil {
		return nil, err
	}
	if p.runtime != "" && !f.runtimes[p.runtime] {
		return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
			"the Docker engine has no runtime %q (it has %s); install it and register it in daemon.json, or choose another runtime",
			p.runtime, strings.Join(slices.Sorted(maps.Keys(f.runtimes)), ", ")))
	}
	if f.seccomp {
		// Only where the engine applies seccomp at all: one without it
		// would refuse the option, and the missing control is a gap.
		prof, err := seccompProfile()
		if err != nil {
			return nil, driver.Errorf(driver.CodeBackend, err, "cannot build the sandbox's seccomp profile")
		}
		p.seccomp = prof
	}
	imageID, err := d.ensureImage(ctx, p.image, p.pull, cfg.Progress)
	if err != nil {
		return nil, err
	}
	ag, err := findAgent(ctx, p.agent, f.arch)
	if err != nil {
		return nil, err
	}
	vol, err := d.agentVolume(ctx, p.image, ag)
	if err != nil {
		return nil, err
	}
	check := ""
	if needsMeasuring(p.runtime) {
		if check, err = d.checkRuntime(ctx, p, f, imageID, ag, vol); err != nil {
			return nil, err
		}
	}
	c, err := d.launch(ctx, p, f, imageID, ag, vol)
	if errors.Is(err, errAgentMissing) {
		// The volume was removed behind our back (sandboxkit gc); fill it
		// again and retry once.
		d.forgetAgentVolume(vol)
		if vol, err = d.agentVolume(ctx, p.image, ag); err != nil {
			return nil, err
		}
		c, err = d.launch(ctx, p, f, imageID, ag, vol)
		if errors.Is(err, errAgentMissing) {
			return nil, driver.Errorf(driver.CodeBackend, err, "the Docker engine does not show the agent binary to the container; check the engine's volume driver and retry")
		}
	}
	if err != nil {
		return nil, err
	}
	if check != "" {
		c.iso.Extra["runtime_check"] = check
	}
	return c, nil
}

// randHex returns n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
