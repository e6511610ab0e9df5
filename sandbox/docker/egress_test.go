package docker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestEgress runs the egress suite in docker sandboxes: the proxy listens
// on the container's own loopback (network mode none) and the host
// decides and dials.
func TestEgress(t *testing.T) {
	sandboxtest.RunEgress(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, opts...)
	})
}

// TestEscapeEgress runs the escape suite in docker sandboxes allowed to
// reach one name (at the egress test servers' ports only): nothing else
// may become reachable.
func TestEscapeEgress(t *testing.T) {
	h := sandboxtest.NewEgressHost(t)
	p := h.EgressPolicy()
	p.Allow = []sandbox.EgressRule{{Host: sandboxtest.EgressAllowed, Ports: []int{h.TLSPort, h.HTTPPort}, Internal: true}}
	t.Cleanup(func() {
		if n := h.Conns(); n != 0 {
			t.Errorf("the escape probes reached the allowed name's servers %d times", n)
		}
	})
	sandboxtest.RunEscape(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, append([]sandbox.Option{sandbox.WithEgress(p)}, opts...)...)
	})
}

// BenchmarkEgressDownload: a 10 MB download with curl through the egress
// proxy of a docker sandbox against the same download by curl on the
// host, in the same iterations (sandboxtest.BenchEgressDownload). With
// the local engine the agent hands each connection to the host over the
// mounted handoff socket (egress_handoff.go), and the host serves it
// directly; the attach stream carries none of the bytes.
func BenchmarkEgressDownload(b *testing.B) {
	sandboxtest.BenchEgressDownload(b, func(b *testing.B, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(b, opts...)
	})
}

// TestEgressHandoffSocket: with a local engine the agent hands the proxy's
// connections to the host over a unix socket mounted into the container
// (the attach stream carries no descriptors). Any program in the
// container can reach that socket too, and gets nothing there: a TCP
// socket of its own that it hands over is refused (the host takes only
// sockets bound to the proxy's address, which a program cannot bind while
// the agent listens) and closed, the host's servers see no connection,
// junk is cut off, and the sandbox's egress goes on working. The socket is removed from the host when the
// sandbox closes.
func TestEgressHandoffSocket(t *testing.T) {
	h := sandboxtest.NewEgressHost(t)
	before := handoffDirs(t)
	sb := newSandbox(t, sandbox.WithEgress(h.EgressPolicy()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if sb.Info().Python == "" {
		sandboxtest.Unavailable(t, "python", "no python3 in the image for the probe")
	}
	probe := fmt.Sprintf(`
import socket, struct
u = socket.socket(socket.AF_UNIX)
u.connect("/run/sandboxkit-egress.sock")
# junk on its own connection: cut off
j = socket.socket(socket.AF_UNIX)
j.connect("/run/sandboxkit-egress.sock")
j.sendall(b"GET / HTTP/1.1\r\n\r\n")
j.settimeout(30)
print("junk:", j.recv(10) == b"")
# a TCP connection of the program's own, handed over: refused, closed
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
a = socket.create_connection(srv.getsockname())
b, _ = srv.accept()
socket.send_fds(u, [struct.pack(">IIB", 0, 1000000, 19)], [b.fileno()])
b.close()
a.settimeout(30)
try:
    a.sendall(b"GET http://blocked.test:%d/hello HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
    print("answer:", (a.recv(200).decode(errors="replace").splitlines() or ["closed"])[0])
except ConnectionResetError:
    print("answer: closed")
`, h.HTTPPort)
	res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"python3", "-c", probe}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "junk: True") || !strings.Contains(res.Stdout, "answer: closed") {
		t.Errorf("a program using the handoff socket got something (want junk cut off and its own socket refused and closed):\n%s%s", res.Stdout, res.Stderr)
	}
	if n := h.Conns(); n != 0 {
		t.Errorf("the host's servers saw %d connections from the probe", n)
	}
	res, err = sb.Commands.Run(ctx, sandbox.Command{Shell: fmt.Sprintf("curl -sS -f --max-time 30 http://%s:%d/hello", sandboxtest.EgressAllowed, h.HTTPPort)})
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "hello") {
		t.Fatalf("egress stopped working after the probe: %+v, %v", res, err)
	}
	// The handoff socket is in use (the host's end of the agent's
	// connection shows in the container's /proc/net/unix, under the
	// listener's name), and that name says nothing about the host: bound
	// by its path it was the host's temporary directory.
	inUse := false
	netUnix := shellOut(t, sb, "cat /proc/net/unix")
	for _, line := range strings.Split(netUnix, "\n") {
		if f := strings.Fields(line); len(f) == 8 && strings.HasPrefix(f[7], "/proc/self/fd/") {
			inUse = true
		}
	}
	if strings.Contains(netUnix, "sandboxkit-egress-") || strings.Contains(netUnix, os.TempDir()+"/") {
		t.Errorf("the container's /proc/net/unix names a host path:\n%s", netUnix)
	}
	if !inUse {
		t.Fatalf("no handoff socket in use: the agent carries the connections over the attach stream\n%s", netUnix)
	}
	sb.Close()
	for dir := range handoffDirs(t) {
		if !before[dir] {
			t.Errorf("the handoff socket's directory %s is left on the host after Close", dir)
		}
	}
}

// handoffDirs lists the docker backend's handoff socket directories in
// the host's temporary directory.
func handoffDirs(t *testing.T) map[string]bool {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "sandboxkit-egress-*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range m {
		out[d] = true
	}
	return out
}

// shellOut runs a shell command in sb and returns its output.
func shellOut(t *testing.T, sb *sandbox.Sandbox, cmd string) string {
	t.Helper()
	res, err := sb.Commands.Run(context.Background(), sandbox.Command{Shell: cmd})
	if err != nil {
		t.Fatal(err)
	}
	return res.Stdout
}
