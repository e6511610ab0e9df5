// Package driver is the narrow contract between sandboxkit's rich API (package
// sandbox) and a backend that provides an isolation boundary (sandbox/local,
// sandbox/docker, ...), in the way database/sql/driver sits below database/sql.
//
// A backend's only jobs are: start the in-sandbox agent (sandbox/agent/server)
// inside its boundary, carry the agent's single byte stream, destroy the
// boundary, and report truthfully which controls it applied; pausing and
// resuming the boundary is optional (Pauser). Commands, jobs, files,
// search, bash sessions and the Python kernel are built once in package
// sandbox on top of the agent protocol and are never re-implemented by a
// backend.
//
// The contract carries facts as data: the one list of error codes (Code,
// Codes) that backends, the agent and package sandbox share; for each
// control, the per-process limit that enforces it and who sets it
// (Control.Rlimit, Control.SetByAgent), next to the words for people
// (Control.Mechanism).
//
// This package must stay below both package sandbox and every backend: it
// imports nothing from this module.
package driver

import (
	"context"
	"io"
	"net"
	"time"
)

// Driver starts sandboxes of one kind. Implementations must be safe for
// concurrent use.
type Driver interface {
	// Name is the backend's short name as reported by Info ("local", "docker").
	Name() string
	// Start creates the isolation boundary described by cfg and starts the
	// agent inside it. It fails with an *Error (code ISOLATION_UNAVAILABLE,
	// ...) rather than applying less than cfg asks for.
	Start(ctx context.Context, cfg Config) (Instance, error)
}

// Config is what the rich layer asks a backend for. Zero values mean "no
// limit" except where noted; the rich layer fills in defaults before calling
// Start.
type Config struct {
	// ID is the sandbox's unique id (used for labels, cgroup names, logs).
	ID string
	// Workspace is a host directory to expose read-write as the sandbox's
	// workspace. Empty means the backend provides a fresh one.
	Workspace string
	// Limits are the resource limits to enforce (defaults filled in).
	Limits Limits
	// Explicit holds only the limits the caller set by name. A backend may
	// skip a default it can only enforce with a harmful fallback (e.g.
	// RLIMIT_AS for memory) but must enforce or refuse an explicit one.
	Explicit Limits
	// Network allows network access (the host's network, or the engine's
	// default) when true. False means no network, enforced by the kernel.
	Network bool
	// Egress says the sandbox gets an egress policy (package sandbox's
	// WithEgress): its agent runs the proxy on the sandbox's loopback. A
	// backend whose stream cannot carry descriptors may then give the
	// agent a socket to hand the proxy's connections over (HandoffSocket).
	Egress bool
	// MinTier is the weakest isolation tier the caller accepts (see Tier).
	// The backend picks the best tier it can and fails when that is below
	// MinTier.
	MinTier Tier
	// AllowWeaker lists tiers below the backend's best that the caller
	// accepts by name (e.g. TierLandlock, TierProcess). A backend never
	// silently falls back to a tier not listed here.
	AllowWeaker []Tier
	// Owner is a free-form label for the creator (process, user), used for
	// container labels and garbage collection.
	Owner string
	// Options carries backend-specific settings (e.g. docker image, runtime).
	Options map[string]string
	// Progress, when set, receives human-readable progress lines during
	// slow steps (image pulls).
	Progress func(string)
}

// Limits are the resource limits a backend must enforce (or refuse).
type Limits struct {
	CPUSeconds    int   // CPU time for the whole sandbox or each process; 0 = none
	MemoryBytes   int64 // memory for the whole sandbox; 0 = none
	Pids          int   // number of processes; 0 = none
	FileSizeBytes int64 // largest single file a process may write; 0 = none
	DiskBytes     int64 // workspace quota; 0 = none
	TmpBytes      int64 // size of the private /tmp; 0 = backend default
	OpenFiles     int   // file descriptors per process; 0 = backend default
}

// Tier is an isolation level, ordered from weakest to strongest.
type Tier int

// The isolation tiers, weakest first. A tier is a report of what was applied,
// measured at creation, never a hope.
const (
	TierNone      Tier = iota // nothing enforced
	TierProcess               // workspace confinement in the agent, rlimits
	TierLandlock              // Landlock + seccomp + rlimits, no namespaces
	TierNamespace             // user/mount/pid/net/ipc/uts namespaces + Landlock + seccomp
	TierContainer             // Docker / runc
	TierGVisor                // gVisor (runsc)
	TierMicroVM               // a virtual machine per sandbox
)

var tierNames = [...]string{"none", "process", "landlock", "namespace", "container", "gvisor", "microvm"}

// String returns the tier's name as used in Info and error messages.
func (t Tier) String() string {
	if t < 0 || int(t) >= len(tierNames) {
		return "unknown"
	}
	return tierNames[t]
}

// ParseTier returns the tier with the given name.
func ParseTier(s string) (Tier, bool) {
	for i, n := range tierNames {
		if n == s {
			return Tier(i), true
		}
	}
	return 0, false
}

// Control is one security or resource control and how it is enforced.
type Control struct {
	// Name of the control: "network", "filesystem", "pids", "memory",
	// "cpu", "file_size", "disk", "processes_visible", "syscalls", ...
	Name string `json:"name"`
	// Enforced reports whether the control is in force.
	Enforced bool `json:"enforced"`
	// Mechanism says how, in words for people (Info, reports, `sandboxkit
	// doctor`), e.g. "net namespace (only lo)", "cgroup v1 pids.max",
	// "RLIMIT_AS (fallback)", "agent path checks only". No program reads
	// it: what a program acts on is in the fields below.
	Mechanism string `json:"mechanism"`
	// Rlimit is the per-process resource limit that enforces the control,
	// "" when another mechanism does (a cgroup, a namespace, the engine).
	Rlimit Rlimit `json:"rlimit,omitempty"`
	// SetByAgent says the backend leaves Rlimit to the in-sandbox agent:
	// package sandbox has the agent set it on every process it starts, at
	// the value of the matching limit (RlimitCPU: Limits.CPUSeconds,
	// RlimitAS: MemoryBytes, RlimitFSIZE: FileSizeBytes, RlimitNOFILE:
	// OpenFiles, RlimitNPROC: Pids), and refuses to start a sandbox whose
	// control names an rlimit it cannot set. False with Rlimit set means
	// the backend set the limit itself, where every process inherits it
	// (on the agent, or on the container).
	SetByAgent bool `json:"set_by_agent,omitempty"`
}

// Rlimit names a per-process resource limit of setrlimit(2).
type Rlimit string

// The per-process resource limits a control may be enforced by.
const (
	RlimitCPU    Rlimit = "RLIMIT_CPU"    // CPU seconds (SIGXCPU, then SIGKILL at the hard limit)
	RlimitAS     Rlimit = "RLIMIT_AS"     // address space, bytes
	RlimitFSIZE  Rlimit = "RLIMIT_FSIZE"  // largest file a process may write, bytes
	RlimitNOFILE Rlimit = "RLIMIT_NOFILE" // open file descriptors
	RlimitNPROC  Rlimit = "RLIMIT_NPROC"  // processes (threads) of the uid
)

// Isolation is the backend's report of what it applied to one sandbox.
type Isolation struct {
	Tier     Tier
	Controls []Control
	// Gaps lists known weaknesses of this tier on this machine, in words a
	// user can act on.
	Gaps []string
	// WorkspacePath is the workspace as processes inside see it
	// ("/workspace" where the backend provides it).
	WorkspacePath string
	// HostWorkspace is the workspace directory on the host, "" when it is
	// not reachable from the host (e.g. inside a container).
	HostWorkspace string
	// Extra holds backend facts (container id, image, cgroup path).
	Extra map[string]string
}

// Instance is one running sandbox boundary with its agent started.
type Instance interface {
	// Conn is the agent's byte stream. The rich layer speaks the agent
	// protocol over it. Closing it makes the agent exit.
	Conn() io.ReadWriteCloser
	// Isolation reports what was applied.
	Isolation() Isolation
	// Close destroys the boundary: every process in it is killed and
	// backend resources are released. It is idempotent.
	Close(ctx context.Context) error
	// Done is closed when the boundary has died (agent exited, container
	// gone).
	Done() <-chan struct{}
}

// Pauser is implemented by an Instance that can freeze every process of
// its sandbox and thaw them again (a cgroup freezer, docker pause,
// SIGSTOP). It is optional, as fs.ReadFileFS is for fs.FS: package sandbox
// finds it by type assertion, and Sandbox.Pause on an instance without it
// fails with CodeUnsupported. A backend implements it only if Pause really
// stops every process: a Pause that does nothing would let a "paused"
// sandbox go on running.
type Pauser interface {
	// Pause freezes every process of the sandbox.
	Pause(ctx context.Context) error
	// Resume thaws a paused sandbox.
	Resume(ctx context.Context) error
}

// Prober is implemented by an Instance that can tell, without a round trip
// to its agent, whether the agent has exited: the kernel's view of the
// agent's stream (a hang-up) rather than a reply. It is optional; package
// sandbox's Pool asks it before handing a ready sandbox over and pings the
// agent when an instance does not implement it. A backend implements it
// only if a false "alive" is impossible once the agent has exited (its end
// of the stream is closed by the exit itself).
type Prober interface {
	// Exited reports whether the agent has exited. It does not block.
	Exited() bool
}

// HandoffSocket is implemented by an Instance that gives its agent a unix
// socket besides its stream (which cannot carry descriptors, like a
// container's attach stream), over which the agent hands the egress
// proxy's connections to the host: their sockets, as descriptors with
// ConnHandoff frames. It is optional; without it the connections' bytes
// are carried over the stream. Whatever connects to the socket is
// treated as the agent is: untrusted, held to the same checks and limits.
type HandoffSocket interface {
	// HandoffSocket returns the host's listener on the socket and the
	// socket's path inside the sandbox; nil and "" when the instance has
	// none (no egress, or an engine on another machine). The instance
	// closes the listener when it closes.
	HandoffSocket() (net.Listener, string)
}

// DefaultStartTimeout bounds how long a backend may take to start when the
// caller's context has no deadline.
const DefaultStartTimeout = 2 * time.Minute
