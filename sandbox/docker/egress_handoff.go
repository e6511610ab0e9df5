package docker

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

// The egress proxy's handoff socket. A container's only channel to the
// host is the engine's attach stream, which carries bytes and no
// descriptors: a download through the egress proxy crossed the host's
// proxy, the engine's copy of the stream and the agent, and took
// 3.2-3.4x the same download by curl on the host (10 MB, idle 2-core
// machine; the attach stream alone moves ~700 MB/s, `cat` in a container
// fed 200 MB through `docker run -i`). With a local engine the host
// listens on a unix socket that is bind-mounted into the container
// (handoffPath); the agent connects to it and hands each connection its
// proxy accepts to the host as a descriptor, and the host serves the
// program's socket directly, as with the local backend's stream.
//
// What it opens: a socket whose only server is this sandbox's egress
// proxy on the host, which treats whatever connects to it as untrusted:
// only empty ConnHandoff frames (the header is checked before anything
// it announces is read), each with a connected TCP socket bound to the
// proxy's own address — a socket the proxy accepted, which a program
// cannot make while the agent listens there — served under the same
// policy and limits as every connection, with I/O that no flag the
// sender shares can make block (package agent/internal/tunnel). A review
// found the first version took any program's socket: a program then
// cleared O_NONBLOCK on it and wedged Sandbox.Close. A program that
// connects to it now gets its connection closed.
// The socket's directory is the host user's alone (0700), so no other
// user of the host reaches it; the socket itself is open to the
// container's user (0666), who reaches it through the mount only. With
// an engine on another machine (DOCKER_HOST=tcp://, ssh://) a host path
// means nothing there: connections are carried over the stream.

// handoffPath is where the handoff socket is mounted in the container.
const handoffPath = "/run/sandboxkit-egress.sock"

// handoffSocket is a container's handoff socket on the host.
type handoffSocket struct {
	l   net.Listener
	dir string
}

// newHandoffSocket listens on a fresh socket for a container that gets an
// egress policy, nil when the engine cannot mount it (not on this
// machine, not Linux) or the socket cannot be made: connections are then
// carried over the stream.
func (d *Driver) newHandoffSocket(egress bool) *handoffSocket {
	if !egress || !d.target.local || runtime.GOOS != "linux" {
		return nil
	}
	dir, err := os.MkdirTemp("", handoffDirPrefix)
	if err != nil {
		return nil
	}
	l, err := listenUnixAnonymously(dir, "s")
	if err == nil {
		err = os.Chmod(filepath.Join(dir, "s"), 0o666)
	}
	if err != nil {
		if l != nil {
			l.Close()
		}
		os.RemoveAll(dir)
		return nil
	}
	return &handoffSocket{l: l, dir: dir}
}

// listenUnixAnonymously listens on a unix socket made as dir/name, bound
// through a descriptor of dir (/proc/self/fd/N/name) rather than by dir's
// path.
//
// Why: a unix socket's bound name is what /proc/net/unix shows, and the
// socket the host's listener accepts for a connection belongs to the
// connecting side's network namespace and carries the listener's name.
// Bound by its path, every container with egress saw the host's
// temporary directory (/tmp/sandboxkit-egress-NNNN/s) in its own
// /proc/net/unix. Through the descriptor the name says nothing about the
// host; the socket is the same file (Close removes the directory).
func listenUnixAnonymously(dir, name string) (net.Listener, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close() // bind has resolved the directory; the name is all that stays
	addr := &net.UnixAddr{Name: "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + name, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	if err != nil {
		return nil, err
	}
	// The name means nothing once d is closed: Close must not unlink
	// through it (the caller removes dir).
	l.SetUnlinkOnClose(false)
	return l, nil
}

// handoffDirPrefix names the host directories newHandoffSocket makes.
const handoffDirPrefix = "sandboxkit-egress-"

// removeHandoffDir removes the handoff socket's host directory of a
// container GC removed: Close removes it, but a creator that died first
// left it in the temporary directory. Only a directory this backend made
// (its name, directly in the temporary directory, the socket's bind
// target) on this machine's engine is removed.
func (d *Driver) removeHandoffDir(c container.Summary) {
	if !d.target.local {
		return // a remote engine's mount sources are paths of its machine
	}
	for _, m := range c.Mounts {
		if m.Destination != handoffPath {
			continue
		}
		dir := filepath.Dir(m.Source)
		if filepath.Base(m.Source) == "s" && filepath.Dir(dir) == filepath.Clean(os.TempDir()) && strings.HasPrefix(filepath.Base(dir), handoffDirPrefix) {
			_ = os.RemoveAll(dir)
		}
	}
}

// mount is the socket's bind mount into the container.
func (h *handoffSocket) mount() mount.Mount {
	return mount.Mount{Type: mount.TypeBind, Source: filepath.Join(h.dir, "s"), Target: handoffPath,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}
}

// close stops listening and removes the socket.
func (h *handoffSocket) close() {
	if h != nil {
		h.l.Close()
		os.RemoveAll(h.dir)
	}
}

// HandoffSocket returns the host's listener on the container's handoff
// socket and its path inside (driver.HandoffSocket); nil without one.
func (c *Container) HandoffSocket() (net.Listener, string) {
	if c.handoff == nil {
		return nil, ""
	}
	return c.handoff.l, handoffPath
}
