package isolate

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Spec describes one sandbox's boundary. The launcher fills in the request
// fields, Prepare validates them and fills in the plan fields, and the
// launcher embeds Handle.Spec (not its own copy) in the configuration it
// sends to stage init, because Enter applies the plan, not the request.
// It is JSON-serializable.
type Spec struct {
	// Tier is the tier to build: driver.TierNamespace or driver.TierLandlock.
	Tier driver.Tier `json:"tier"`
	// ID names the sandbox's cgroups (letters, digits, '-', '_' only).
	ID string `json:"id"`
	// HostWorkspace is the host directory the sandbox works in. Required.
	HostWorkspace string `json:"host_workspace"`
	// DisposableWorkspace says the workspace is this sandbox's alone and
	// is deleted after Cleanup (the local backend's temporary workspace).
	// A root host then gives it to a fresh uid without the ownership
	// record that lets sandboxes share a workspace (wsowner.go), and does
	// not give it back.
	DisposableWorkspace bool `json:"disposable_workspace,omitempty"`
	// ReadOnlyPaths are host paths shown read-only at the same place
	// inside; nil means DefaultReadOnlyPaths. Paths that do not exist on
	// the host are skipped; symlinks (as /bin -> usr/bin) are recreated.
	ReadOnlyPaths []string `json:"read_only_paths,omitempty"`
	// Network shares the host's network when true. False means no network,
	// enforced by a net namespace (namespace tier) or a seccomp socket
	// filter (landlock tier).
	Network bool `json:"network"`
	// Hostname inside the namespace tier; "" means "sandbox".
	Hostname string `json:"hostname,omitempty"`
	// Limits are the resource limits. TmpBytes 0 means DefaultTmpBytes;
	// OpenFiles 0 means DefaultOpenFiles.
	Limits driver.Limits `json:"limits"`

	// Plan is filled in by Prepare. Enter refuses a Spec without it.
	Plan *Plan `json:"plan,omitempty"`
}

// Plan is what Prepare decided for this machine; Enter and Complete follow
// it. It is exported only so that it travels in the JSON configuration.
type Plan struct {
	HostUID int `json:"host_uid"` // host uid that the sandbox's uid 0 is (namespace) or runs as (landlock)
	HostGID int `json:"host_gid"`
	// MemoryCgroup and PidsCgroup say whether a cgroup enforces the limit;
	// when false Enter falls back to RLIMIT_AS / RLIMIT_NPROC.
	MemoryCgroup bool `json:"memory_cgroup"`
	PidsCgroup   bool `json:"pids_cgroup"`
	// LandlockABI is the ABI to use, 0 for none (namespace tier only).
	LandlockABI int `json:"landlock_abi"`
	// TmpDir is the private TMPDIR on the host (landlock tier only).
	TmpDir string `json:"tmp_dir,omitempty"`
	// DropIdentity makes Enter switch to HostUID/HostGID itself
	// (landlock tier started as root).
	DropIdentity bool `json:"drop_identity,omitempty"`
	// NprocShared says the sandbox runs as the host user's own uid with no
	// user namespace of its own (landlock tier, unprivileged host), where
	// RLIMIT_NPROC would count the host user's processes too: it is not a
	// limit of the sandbox, so it is not applied and pids are reported as
	// not enforced unless a pids cgroup enforces them.
	NprocShared bool `json:"nproc_shared,omitempty"`
	// CommandsCgroup says the agent gets CommandsCgroupFD and
	// CommandsPidsFD, the tasks file and pids.current of a child pids
	// cgroup limited to Limits.Pids, which every command joins before it
	// runs (CommandsCgroup): a fork bomb fills that child while the agent
	// keeps AgentTaskReserve tasks of room in the parent, so it needs no
	// thread warm-up.
	CommandsCgroup bool `json:"commands_cgroup,omitempty"`
}

// DefaultReadOnlyPaths are the host system directories shown read-only
// inside the sandbox. Sensitive files under /etc (shadow, sudoers, ssh host
// keys) stay unreadable because the sandbox's uid is an unprivileged host
// uid that file permissions deny.
var DefaultReadOnlyPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// Defaults for limits left at zero.
const (
	DefaultTmpBytes  = 256 << 20 // size of the private /tmp tmpfs
	DefaultOpenFiles = 1024      // RLIMIT_NOFILE
)

// AgentTaskReserve is added to Limits.Pids for the agent: pids cgroups and
// RLIMIT_NPROC count threads, and the agent is a Go program whose runtime
// aborts when it cannot create a thread. With a v1 pids cgroup the commands
// live in a child cgroup limited to Limits.Pids (Plan.CommandsCgroup), so
// the reserve stays the agent's. Elsewhere, Complete (CompleteAsync) starts
// agentWarmThreads threads before the agent may start a process, so that a
// fork bomb that fills the limit later does not starve the agent; the rest
// of the reserve covers the runtime's own threads.
const AgentTaskReserve = 24

const agentWarmThreads = 16

// WorkspaceInside is where the workspace appears in the namespace tier.
const WorkspaceInside = "/workspace"

func (s *Spec) tmpBytes() int64 {
	if s.Limits.TmpBytes > 0 {
		return s.Limits.TmpBytes
	}
	return DefaultTmpBytes
}

func (s *Spec) openFiles() int {
	if s.Limits.OpenFiles > 0 {
		return s.Limits.OpenFiles
	}
	return DefaultOpenFiles
}

func (s *Spec) readOnlyPaths() []string {
	if s.ReadOnlyPaths != nil {
		return s.ReadOnlyPaths
	}
	return DefaultReadOnlyPaths
}

// validate checks the request fields; it does not look at the machine.
func (s *Spec) validate() error {
	if s.Tier != driver.TierNamespace && s.Tier != driver.TierLandlock {
		return fmt.Errorf("isolate: tier %q is not built by this package (want namespace or landlock)", s.Tier)
	}
	if s.ID == "" {
		return errors.New("isolate: Spec.ID is empty")
	}
	for _, r := range s.ID {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') || len(s.ID) > 64 {
			return fmt.Errorf("isolate: Spec.ID %q: use at most 64 letters, digits, '-' or '_'", s.ID)
		}
	}
	if s.HostWorkspace == "" || !filepath.IsAbs(s.HostWorkspace) {
		return fmt.Errorf("isolate: Spec.HostWorkspace %q must be an absolute path", s.HostWorkspace)
	}
	for _, p := range s.readOnlyPaths() {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return fmt.Errorf("isolate: read-only path %q must be absolute, clean and not /", p)
		}
		switch p {
		case "/proc", "/dev", "/tmp", WorkspaceInside:
			return fmt.Errorf("isolate: read-only path %q is provided by the sandbox itself", p)
		}
	}
	l := s.Limits
	if l.CPUSeconds < 0 || l.MemoryBytes < 0 || l.Pids < 0 || l.FileSizeBytes < 0 || l.DiskBytes < 0 || l.TmpBytes < 0 || l.OpenFiles < 0 {
		return errors.New("isolate: limits must not be negative")
	}
	if l.Pids == 1 {
		return errors.New("isolate: Limits.Pids 1 leaves no room for a command next to the agent; use at least 2")
	}
	if l.DiskBytes > 0 && s.Tier != driver.TierNamespace {
		return errors.New("isolate: a disk quota (Limits.DiskBytes) needs the namespace tier (a tmpfs workspace); the landlock tier has no quota mechanism")
	}
	if l.MemoryBytes > 0 && s.Tier == driver.TierNamespace && l.DiskBytes+s.tmpBytes() >= l.MemoryBytes {
		return fmt.Errorf("isolate: /tmp (%d bytes) plus the disk quota (%d bytes) are tmpfs and charged to memory; together they must stay below Limits.MemoryBytes (%d) or a full disk leaves no memory to run anything", s.tmpBytes(), l.DiskBytes, l.MemoryBytes)
	}
	return nil
}
