package isolate

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// HostSocket is a unix socket on this machine through which a process that
// connects gets powers far beyond its own: the container engines are host
// root for whoever may connect (their group: docker, ...), a D-Bus bus
// reaches every service on it, ssh-agent signs with the user's keys.
// `sandboxkit doctor` lists the ones it finds, because they are what a
// sandbox sharing the host's filesystem would reach first (issue 25: curl
// got the Docker engine from the landlock tier); every tier of this
// package keeps them out (see HostSocketWall).
type HostSocket struct {
	Name  string // "docker", "containerd", "podman", "dbus-system", "ssh-agent", ...
	Path  string
	Grant string // what connecting gives: "host root", "your ssh keys", ...
	// Reachable says this process could connect to it: anything running
	// as this user, with its groups, could too.
	Reachable bool
}

// hostSocketCandidate is a place such a socket lives.
type hostSocketCandidate struct {
	name, grant string
	paths       func() []string
}

func fixed(paths ...string) func() []string { return func() []string { return paths } }

// inRuntimeDir are paths below $XDG_RUNTIME_DIR (rootless engines, the
// session bus).
func inRuntimeDir(rel ...string) func() []string {
	return func() []string {
		dir := os.Getenv("XDG_RUNTIME_DIR")
		if dir == "" {
			dir = filepath.Join("/run/user", strconv.Itoa(os.Getuid()))
		}
		out := make([]string, len(rel))
		for i, r := range rel {
			out[i] = filepath.Join(dir, r)
		}
		return out
	}
}

// fromEnv is a socket path named by an environment variable, given as a
// plain path or as unix:path=... (D-Bus) or unix://... (DOCKER_HOST).
func fromEnv(name string) func() []string {
	return func() []string {
		v := os.Getenv(name)
		for _, part := range strings.Split(v, ";") { // D-Bus lists several addresses
			switch {
			case strings.HasPrefix(part, "unix://"):
				return []string{strings.TrimPrefix(part, "unix://")}
			case strings.HasPrefix(part, "unix:"):
				for _, kv := range strings.Split(strings.TrimPrefix(part, "unix:"), ",") {
					if p, ok := strings.CutPrefix(kv, "path="); ok {
						return []string{p}
					}
				}
			case strings.HasPrefix(part, "/"):
				return []string{part}
			}
		}
		return nil
	}
}

// hostSocketCandidates are the well-known places, in doctor's order.
var hostSocketCandidates = []hostSocketCandidate{
	{"docker", "host root", fromEnv("DOCKER_HOST")},
	{"docker", "host root", fixed("/var/run/docker.sock", "/run/docker.sock")},
	{"docker-rootless", "your containers and files", inRuntimeDir("docker.sock")},
	{"containerd", "host root", fixed("/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock", "/run/docker/containerd/containerd.sock")},
	{"podman", "host root", fixed("/run/podman/podman.sock", "/var/run/podman/podman.sock")},
	{"podman-rootless", "your containers and files", inRuntimeDir("podman/podman.sock")},
	{"cri-o", "host root", fixed("/run/crio/crio.sock", "/var/run/crio/crio.sock")},
	{"libvirt", "host root", fixed("/run/libvirt/libvirt-sock", "/var/run/libvirt/libvirt-sock")},
	{"lxd", "host root", fixed("/var/snap/lxd/common/lxd/unix.socket", "/var/lib/lxd/unix.socket")},
	{"dbus-system", "the system's services (polkit decides what they do for you)", fixed("/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket")},
	{"dbus-session", "your desktop session (start programs as you, read secrets)", fromEnv("DBUS_SESSION_BUS_ADDRESS")},
	{"dbus-session", "your desktop session (start programs as you, read secrets)", inRuntimeDir("bus")},
	{"systemd-user", "your user services (start programs as you)", inRuntimeDir("systemd/private")},
	{"ssh-agent", "your ssh keys", fromEnv("SSH_AUTH_SOCK")},
	{"gpg-agent", "your gpg and ssh keys", inRuntimeDir("gnupg/S.gpg-agent", "gnupg/S.gpg-agent.ssh")},
}

// HostSockets lists the sockets of hostSocketCandidates that exist on this
// machine, each once, and whether this process can connect to each.
func HostSockets() []HostSocket {
	var out []HostSocket
	seen := map[string]bool{}
	for _, c := range hostSocketCandidates {
		for _, p := range c.paths() {
			real, err := filepath.EvalSymlinks(p)
			if err != nil || seen[real] {
				continue
			}
			fi, err := os.Stat(real)
			if err != nil || fi.Mode()&os.ModeSocket == 0 {
				continue
			}
			seen[real] = true
			out = append(out, HostSocket{Name: c.name, Path: p, Grant: c.grant, Reachable: canConnect(real)})
		}
	}
	return out
}

// canConnect connects and hangs up at once: the engines and buses
// tolerate a client that says nothing.
func canConnect(path string) bool {
	c, err := net.DialTimeout("unix", path, 500*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// HostSocketWall says how each tier keeps the host's unix sockets out, for
// a machine with Landlock ABI abi.
func HostSocketWall(abi int) map[string]string {
	ll := "seccomp refuses socket(AF_UNIX) and datagram socketpairs (Landlock ABI " + strconv.Itoa(abi) + " does not mediate connect(); ABI 9 does)"
	if abi >= 9 {
		ll = "Landlock LANDLOCK_ACCESS_FS_RESOLVE_UNIX: connect() only to sockets in the workspace and TMPDIR"
	}
	return map[string]string{
		"namespace": "mount namespace: no host socket is in the sandbox's view",
		"landlock":  ll,
	}
}
