package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// DefaultNamespace is the namespace sandboxes run in when none is chosen.
const DefaultNamespace = "default"

// DefaultImage is the image a sandbox runs when none is chosen. It needs
// only a POSIX shell with head and chmod (and python3 for the Python
// kernel); the agent is brought in over the attach stream.
const DefaultImage = "python:3.12-slim"

// DefaultHardDeadline is the pod's activeDeadlineSeconds when none is
// chosen: an outer bound on the pod's life that holds even if every client
// is gone. The sandbox's TTL (and Renew) are enforced by the client well
// within it; the API server lets the deadline only be lowered after
// creation, so it cannot follow Renew.
const DefaultHardDeadline = 24 * time.Hour

// Sizes used when the sandbox's limits leave them open. The workspace and
// /tmp are memory-backed emptyDirs, whose pages count against the memory
// limit, so they are kept modest.
const (
	defaultTmpBytes       = 256 << 20
	defaultWorkspaceBytes = 1 << 30
	agentVolumeBytes      = 128 << 20
)

// Paths and names inside the pod.
const (
	containerName = "sandbox"
	workspacePath = "/workspace"
	agentDir      = "/.sandboxkit"
	agentPath     = agentDir + "/agent"
)

// Option keys understood in driver.Config.Options; each overrides the
// matching With... option of the driver for one sandbox.
const (
	OptNamespace     = "namespace"         // namespace of the pod
	OptImage         = "image"             // image reference
	OptRuntimeClass  = "runtimeClass"      // RuntimeClass name, e.g. "gvisor"
	OptNodeSelector  = "nodeSelector"      // "k=v,k2=v2"
	OptTolerations   = "tolerations"       // "key=value:Effect,key:Effect,..."
	OptCPU           = "cpu"               // CPU limit, e.g. "1.5" or "500m"
	OptCPURequest    = "cpuRequest"        // CPU request for scheduling
	OptMemoryRequest = "memoryRequest"     // memory request, e.g. "256Mi"
	OptPullSecrets   = "pullSecrets"       // "secret1,secret2"
	OptPull          = "pull"              // Always, IfNotPresent, Never
	OptUID           = "uid"               // fixed numeric uid (default: one per sandbox)
	OptAgent         = "agent"             // path of a static agent binary
	OptDeadline      = "deadline"          // hard cap, e.g. "6h"
	OptAcceptNetwork = "acceptOpenNetwork" // "true": accept a cluster that does not enforce NetworkPolicy
)

var optionKeys = []string{OptNamespace, OptImage, OptRuntimeClass, OptNodeSelector, OptTolerations, OptCPU,
	OptCPURequest, OptMemoryRequest, OptPullSecrets, OptPull, OptUID, OptAgent, OptDeadline, OptAcceptNetwork}

// Option configures a Driver.
type Option func(*settings)

type settings struct {
	namespace    string
	image        string
	runtimeClass string
	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	cpu          string
	cpuRequest   string
	memRequest   string
	pullSecrets  []string
	pull         corev1.PullPolicy
	uid          int64 // 0: one per sandbox
	agentPath    string
	deadline     time.Duration
	acceptOpen   bool
	kubeconfig   string
	context      string
	rest         *rest.Config
}

// WithNamespace sets the namespace sandboxes run in (default
// DefaultNamespace, or the namespace of the kubeconfig's context).
func WithNamespace(ns string) Option { return func(s *settings) { s.namespace = ns } }

// WithImage sets the image sandboxes run (default DefaultImage).
func WithImage(ref string) Option { return func(s *settings) { s.image = ref } }

// WithRuntimeClass runs sandboxes with a RuntimeClass. One whose handler is
// runsc (gVisor) reports the gvisor tier, one whose handler names kata
// reports microvm; any other reports container.
func WithRuntimeClass(name string) Option { return func(s *settings) { s.runtimeClass = name } }

// WithNodeSelector restricts sandboxes to nodes with these labels.
func WithNodeSelector(sel map[string]string) Option {
	return func(s *settings) { s.nodeSelector = maps.Clone(sel) }
}

// WithTolerations lets sandboxes run on nodes with matching taints (e.g. a
// node pool reserved for sandboxes).
func WithTolerations(t ...corev1.Toleration) Option {
	return func(s *settings) { s.tolerations = slices.Clone(t) }
}

// WithCPU limits each sandbox's CPU rate (a Kubernetes quantity: "1.5",
// "500m"); the request defaults to the same when not set.
func WithCPU(limit string) Option { return func(s *settings) { s.cpu = limit } }

// WithRequests sets the CPU and memory the scheduler reserves for each
// sandbox (quantities; "" leaves one unset, and then the request equals
// the limit where there is one).
func WithRequests(cpu, memory string) Option {
	return func(s *settings) { s.cpuRequest, s.memRequest = cpu, memory }
}

// WithImagePullSecrets names secrets in the namespace used to pull the image.
func WithImagePullSecrets(names ...string) Option {
	return func(s *settings) { s.pullSecrets = slices.Clone(names) }
}

// WithPullPolicy sets the image pull policy (default IfNotPresent).
func WithPullPolicy(p corev1.PullPolicy) Option { return func(s *settings) { s.pull = p } }

// WithUID runs every sandbox as this fixed non-zero uid (and gid). By
// default each sandbox gets a uid of its own, which is what makes its pids
// limit per sandbox (see the package doc); with a fixed uid the pids limit
// is not enforced per sandbox and is reported so.
func WithUID(uid int64) Option { return func(s *settings) { s.uid = uid } }

// WithAgentBinary sets the static Linux agent binary sent into every pod
// (see the package doc for how one is found otherwise).
func WithAgentBinary(path string) Option { return func(s *settings) { s.agentPath = path } }

// WithHardDeadline sets the pod's activeDeadlineSeconds (default
// DefaultHardDeadline): the longest a sandbox can live, whatever its TTL.
func WithHardDeadline(d time.Duration) Option { return func(s *settings) { s.deadline = d } }

// WithUnenforcedNetworkAccepted accepts, by name, a cluster whose network
// does not enforce the sandbox's deny-all NetworkPolicy: the sandbox is
// created and Info reports its network control as not enforced. Without
// it such a cluster is refused with ISOLATION_UNAVAILABLE.
func WithUnenforcedNetworkAccepted() Option { return func(s *settings) { s.acceptOpen = true } }

// WithKubeconfig reads the cluster's address and credentials from this
// file instead of $KUBECONFIG / ~/.kube/config / the in-cluster config,
// optionally with a context other than the current one.
func WithKubeconfig(path, context string) Option {
	return func(s *settings) { s.kubeconfig, s.context = path, context }
}

// WithRESTConfig uses an existing client configuration.
func WithRESTConfig(c *rest.Config) Option { return func(s *settings) { s.rest = rest.CopyConfig(c) } }

// Driver starts sandboxes as Kubernetes pods. It is a driver.Driver; use it
// with sandbox.WithDriver. It is safe for concurrent use.
type Driver struct {
	s       settings
	rest    *rest.Config
	cs      kubernetes.Interface
	confErr error

	mu      sync.Mutex
	classes map[string]string // RuntimeClass name -> handler
}

// errNoConfig marks a machine without any cluster configuration.
var errNoConfig = errors.New("no Kubernetes configuration")

// New returns a Kubernetes driver. It does not contact the cluster: an
// unreachable or unconfigured one is reported by Start, with code BACKEND.
func New(opts ...Option) *Driver {
	d := &Driver{s: settings{image: DefaultImage, pull: corev1.PullIfNotPresent, deadline: DefaultHardDeadline}}
	for _, o := range opts {
		o(&d.s)
	}
	d.rest = d.s.rest
	ns := ""
	if d.rest == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if d.s.kubeconfig != "" {
			rules.ExplicitPath = d.s.kubeconfig
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: d.s.context})
		d.rest, d.confErr = cc.ClientConfig()
		if clientcmd.IsEmptyConfig(d.confErr) {
			d.confErr = errNoConfig
		}
		ns, _, _ = cc.Namespace()
	}
	if d.s.namespace == "" {
		d.s.namespace = ns
	}
	if d.s.namespace == "" {
		d.s.namespace = DefaultNamespace
	}
	if d.confErr == nil {
		// Many sandboxes start at once on a busy platform: the default
		// client-side rate limit (5 qps) would queue them.
		d.rest.QPS, d.rest.Burst = 100, 200
		d.cs, d.confErr = kubernetes.NewForConfig(d.rest)
	}
	return d
}

// Name returns "kubernetes".
func (d *Driver) Name() string { return "kubernetes" }

// Namespace returns the namespace sandboxes run in unless an option says otherwise.
func (d *Driver) Namespace() string { return d.s.namespace }

// Client returns the clientset and REST configuration the driver uses (for
// tests and tools that need the cluster directly).
func (d *Driver) Client() (kubernetes.Interface, *rest.Config, error) {
	if d.confErr != nil {
		return nil, nil, d.configError()
	}
	return d.cs, d.rest, nil
}

func (d *Driver) configError() error {
	if errors.Is(d.confErr, errNoConfig) {
		return driver.Errorf(driver.CodeBackend, d.confErr,
			"no Kubernetes cluster is configured: set KUBECONFIG (or ~/.kube/config), or run inside a cluster with a service account")
	}
	return driver.Errorf(driver.CodeBackend, d.confErr, "cannot read the Kubernetes configuration (check KUBECONFIG)")
}

// plan is one sandbox's resolved settings.
type plan struct {
	cfg          driver.Config
	name         string
	namespace    string
	image        string
	runtimeClass string
	handler      string
	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	cpu          *resource.Quantity
	cpuRequest   *resource.Quantity
	memRequest   *resource.Quantity
	pullSecrets  []string
	pull         corev1.PullPolicy
	uid          int64
	ownUID       bool // uid chosen for this sandbox alone
	agent        string
	deadline     time.Duration
	acceptOpen   bool
	tier         driver.Tier
}

var (
	// A pod name is a DNS subdomain; ours is "sandboxkit-" + id and also
	// a label value (63 characters).
	idRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?$`)
	labelRE = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$`)
	// A namespace name is a DNS label.
	nsRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

func invalid(err error, format string, args ...any) error {
	return driver.Errorf(driver.CodeInvalidArgument, err, fmt.Sprintf(format, args...))
}

// resolve merges the driver's settings with cfg.Options and validates them,
// so that bad input fails before anything is created on the cluster.
func (d *Driver) resolve(cfg driver.Config) (*plan, error) {
	s := d.s
	p := &plan{cfg: cfg, namespace: s.namespace, image: s.image, runtimeClass: s.runtimeClass,
		nodeSelector: s.nodeSelector, tolerations: s.tolerations, pullSecrets: s.pullSecrets,
		pull: s.pull, uid: s.uid, agent: s.agentPath, deadline: s.deadline, acceptOpen: s.acceptOpen}
	cpu, cpuReq, memReq := s.cpu, s.cpuRequest, s.memRequest
	for _, k := range slices.Sorted(maps.Keys(cfg.Options)) {
		v := cfg.Options[k]
		switch k {
		case OptNamespace:
			p.namespace = v
		case OptImage:
			p.image = v
		case OptRuntimeClass:
			p.runtimeClass = v
		case OptNodeSelector:
			m, err := parseMap(v)
			if err != nil {
				return nil, invalid(err, "kubernetes option %s=%q must be key=value pairs separated by commas", k, v)
			}
			p.nodeSelector = m
		case OptTolerations:
			t, err := parseTolerations(v)
			if err != nil {
				return nil, invalid(err, "kubernetes option %s=%q must be key[=value]:Effect items separated by commas (Effect: NoSchedule, PreferNoSchedule, NoExecute, or empty)", k, v)
			}
			p.tolerations = t
		case OptCPU:
			cpu = v
		case OptCPURequest:
			cpuReq = v
		case OptMemoryRequest:
			memReq = v
		case OptPullSecrets:
			p.pullSecrets = splitList(v)
		case OptPull:
			p.pull = corev1.PullPolicy(v)
		case OptUID:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, invalid(err, "kubernetes option uid=%q must be a number", v)
			}
			p.uid = n
		case OptAgent:
			p.agent = v
		case OptDeadline:
			dl, err := time.ParseDuration(v)
			if err != nil {
				return nil, invalid(err, "kubernetes option deadline=%q must be a duration such as 6h", v)
			}
			p.deadline = dl
		case OptAcceptNetwork:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, invalid(err, "kubernetes option %s=%q must be true or false", k, v)
			}
			p.acceptOpen = b
		default:
			return nil, invalid(nil, "unknown kubernetes option %q; known: %s", k, strings.Join(optionKeys, ", "))
		}
	}
	if p.image == "" {
		return nil, invalid(nil, "kubernetes image is empty; pass an image reference such as %s", DefaultImage)
	}
	if !nsRE.MatchString(p.namespace) {
		return nil, invalid(nil, "kubernetes namespace %q is not a valid namespace name", p.namespace)
	}
	switch p.pull {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, invalid(nil, "kubernetes pull policy %q is not one of Always, IfNotPresent, Never", p.pull)
	}
	for _, q := range []struct {
		s   string
		dst **resource.Quantity
		opt string
	}{{cpu, &p.cpu, OptCPU}, {cpuReq, &p.cpuRequest, OptCPURequest}, {memReq, &p.memRequest, OptMemoryRequest}} {
		if q.s == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.s)
		if err != nil || v.Sign() <= 0 {
			return nil, invalid(err, "kubernetes option %s=%q must be a positive quantity such as 1.5, 500m or 256Mi", q.opt, q.s)
		}
		*q.dst = &v
	}
	if p.uid < 0 || p.uid > 1<<31-1 {
		return nil, invalid(nil, "kubernetes uid %d is out of range", p.uid)
	}
	if p.uid == 0 {
		if s.uid == 0 && cfg.Options[OptUID] == "" {
			p.uid = sandboxUID()
			p.ownUID = true
		} else {
			return nil, invalid(nil, "kubernetes uid 0 (root) is refused: sandboxes run as non-root; choose a uid above 0 or leave it unset")
		}
	}
	if p.deadline < 10*time.Second {
		return nil, invalid(nil, "kubernetes hard deadline %v is too short (at least 10s)", p.deadline)
	}
	if cfg.Workspace != "" {
		return nil, driver.Errorf(driver.CodeInvalidArgument, nil,
			"the kubernetes backend cannot mount a host workspace directory (the pod runs on a cluster node); leave Workspace empty and copy files in and out through the sandbox's file API")
	}
	if cfg.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		p.cfg.ID = hex.EncodeToString(b[:])
	}
	if !idRE.MatchString(p.cfg.ID) {
		return nil, invalid(nil, "sandbox id %q cannot name a pod: use lower-case letters, digits and '-' (at most 52)", p.cfg.ID)
	}
	if cfg.Owner != "" && !labelRE.MatchString(cfg.Owner) {
		return nil, invalid(nil, "sandbox owner %q cannot be a label value: use letters, digits, '-', '_', '.' (at most 63)", cfg.Owner)
	}
	p.name = "sandboxkit-" + p.cfg.ID
	return p, nil
}

// sandboxUID picks a uid for one sandbox from a range of 2^30 that no
// distribution assigns, so that two sandboxes practically never share one
// (the pids limit counts processes per uid, node-wide).
func sandboxUID() int64 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return 1<<30 + int64(binary.BigEndian.Uint32(b[:])%(1<<30-1))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseMap(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

func parseTolerations(s string) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for _, item := range splitList(s) {
		kv, effect, _ := strings.Cut(item, ":")
		t := corev1.Toleration{Effect: corev1.TaintEffect(effect)}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("unknown effect %q", effect)
		}
		if k, v, ok := strings.Cut(kv, "="); ok {
			t.Key, t.Value, t.Operator = k, v, corev1.TolerationOpEqual
		} else {
			t.Key, t.Operator = kv, corev1.TolerationOpExists
		}
		out = append(out, t)
	}
	return out, nil
}

// tierOf resolves p's RuntimeClass to its handler and the tier it gives.
func (d *Driver) tierOf(ctx context.Context, p *plan) error {
	p.tier = driver.TierContainer
	if p.runtimeClass == "" {
		return checkTier(p)
	}
	d.mu.Lock()
	h, ok := d.classes[p.runtimeClass]
	d.mu.Unlock()
	if !ok {
		rc, err := d.cs.NodeV1().RuntimeClasses().Get(ctx, p.runtimeClass, metav1.GetOptions{})
		if err != nil {
			return d.apiError("reading RuntimeClass "+p.runtimeClass, err)
		}
		h = rc.Handler
		d.mu.Lock()
		if d.classes == nil {
			d.classes = map[string]string{}
		}
		d.classes[p.runtimeClass] = h
		d.mu.Unlock()
	}
	p.handler = h
	switch {
	case h == "runsc" || strings.HasPrefix(h, "runsc-") || h == "gvisor":
		p.tier = driver.TierGVisor
	case strings.HasPrefix(h, "kata"):
		p.tier = driver.TierMicroVM
	}
	return checkTier(p)
}

func checkTier(p *plan) error {
	if p.tier < p.cfg.MinTier {
		return driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
			"the kubernetes backend with runtime class %q gives tier %s, below the required %s; choose a RuntimeClass whose handler is runsc (gVisor) or kata",
			p.runtimeClass, p.tier, p.cfg.MinTier))
	}
	return nil
}

// Start creates the sandbox's NetworkPolicy and pod, waits until the pod
// runs, attaches to its stdio, sends the agent in, measures that the
// network is really closed, and returns the running sandbox. On any
// failure nothing is left on the cluster.
func (d *Driver) Start(ctx context.Context, cfg driver.Config) (driver.Instance, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, driver.DefaultStartTimeout)
		defer cancel()
	}
	if d.confErr != nil {
		return nil, d.configError()
	}
	p, err := d.resolve(cfg)
	if err != nil {
		return nil, err
	}
	if err := d.tierOf(ctx, p); err != nil {
		return nil, err
	}
	return d.launch(ctx, p)
}
