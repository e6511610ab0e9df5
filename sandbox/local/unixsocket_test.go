//go:build linux

package local_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// dockerSocket is where the Docker engine listens on Debian and most
// distributions; whoever can connect to it is root on the host.
const dockerSocket = "/var/run/docker.sock"

// newLandlockTier creates a sandbox on the landlock tier (forced with
// WithTier, even where namespaces work). Where the tier cannot be built
// the test skips, or fails when SANDBOXKIT_REQUIRE names "landlock".
func newLandlockTier(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []sandbox.Option{sandbox.WithDriver(local.New(local.WithTier(sandbox.TierLandlock))), sandbox.AllowWeaker(sandbox.TierLandlock)}
	sb, err := sandbox.New(ctx, append(base, opts...)...)
	if err != nil {
		if sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable {
			sandboxtest.Unavailable(t, "landlock", err.Error())
		}
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// hostUnixListener listens on a unix socket in a fresh host directory that
// anyone may enter, the socket itself mode 0777: only the sandbox's
// boundary can keep a process from connecting. It returns the path and a
// channel that receives one value per accepted connection.
func hostUnixListener(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandboxkit-unix-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	path := filepath.Join(dir, "host.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o777)
	hits := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			hits <- struct{}{}
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); os.RemoveAll(dir) })
	return path, hits
}

// reachableDockerSocket returns the Docker socket when this test process
// can connect to it (as root, or as a user in the docker group), "" when it
// cannot; with SANDBOXKIT_REQUIRE naming "docker" (as CI does, also for its
// unprivileged user, whom it adds to the docker group) an unreachable
// engine is a failure.
func reachableDockerSocket(t *testing.T) string {
	t.Helper()
	c, err := net.DialTimeout("unix", dockerSocket, 2*time.Second)
	if err != nil {
		if sandboxtest.Required("docker") {
			t.Fatalf("SANDBOXKIT_REQUIRE names docker, but this test (uid %d, groups %v) cannot connect to %s: %v", os.Getuid(), groups(), dockerSocket, err)
		}
		t.Logf("the host cannot reach %s (%v): probing only the test's own socket", dockerSocket, err)
		return ""
	}
	c.Close()
	return dockerSocket
}

func groups() []int {
	g, _ := os.Getgroups()
	return g
}

// pyUnixConnect connects to each unix stream socket path given and prints
// "connected PATH" or "refused PATH ErrorName"; for a path given as
// "dgram:PATH" it sends a datagram there, from a datagram socket and from
// each end of a datagram socketpair (which a process may also connect() or
// sendto() elsewhere), and from a stream socketpair, printing "sent HOW
// PATH" or "refused HOW PATH ErrorName".
const pyUnixConnect = `import socket, sys
def dgram(how, path):
    try:
        if how == "socket":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.sendto(b"x", path)
        elif how == "dgram-pair-sendto":
            s = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]
            s.sendto(b"x", path)
        elif how == "dgram-pair-connect":
            s = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]
            s.connect(path)
            s.send(b"x")
        elif how == "stream-pair-sendto":
            s = socket.socketpair()[0]
            s.sendto(b"x", path)
        print("sent", how, path)
    except Exception as e:
        print("refused", how, path, type(e).__name__)
for path in sys.argv[1:]:
    if path.startswith("dgram:"):
        for how in ("socket", "dgram-pair-sendto", "dgram-pair-connect", "stream-pair-sendto"):
            dgram(how, path[6:])
        continue
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(path)
        print("connected", path)
    except Exception as e:
        print("refused", path, type(e).__name__)
`

// hostUnixgram listens for datagrams on a unix socket (mode 0777) in a
// fresh host directory; the channel receives one value per datagram.
func hostUnixgram(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandboxkit-unixgram-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	path := filepath.Join(dir, "host.dgram")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o777)
	hits := make(chan struct{}, 16)
	go func() {
		buf := make([]byte, 16)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
			hits <- struct{}{}
		}
	}()
	t.Cleanup(func() { c.Close(); os.RemoveAll(dir) })
	return path, hits
}

// TestLandlockTierKeepsOutHostUnixSockets is issue 25: on the landlock
// tier a sandboxed command reached the host's Docker engine through
// /var/run/docker.sock (as a user in the docker group, that is host root).
// Neither curl nor Python's socket.AF_UNIX may connect to a unix socket of
// the host: not the Docker socket (when this test's user can reach it, as
// CI's unprivileged user in the docker group can), not a 0777 socket the
// test listens on.
func TestLandlockTierKeepsOutHostUnixSockets(t *testing.T) {
	for _, network := range []bool{false, true} {
		t.Run(fmt.Sprintf("network=%v", network), func(t *testing.T) {
			var opts []sandbox.Option
			if network {
				opts = append(opts, sandbox.WithNetwork())
			}
			sb := newLandlockTier(t, opts...)
			own, hits := hostUnixListener(t)
			dgram, dgramHits := hostUnixgram(t)
			targets := []string{own}
			if d := reachableDockerSocket(t); d != "" {
				targets = append(targets, d)
			}
			if sb.Info().Python == "" {
				sandboxtest.Unavailable(t, "python", "no python3 in the sandbox")
			}
			var script strings.Builder
			for _, p := range targets {
				fmt.Fprintf(&script, "out=$(curl -sS -m 5 --unix-socket %s http://x/version 2>&1); echo \"curl $? %s $out\"\n", p, p)
			}
			fmt.Fprintf(&script, "cat > \"$TMPDIR/c.py\" <<'EOF'\n%sEOF\n%s \"$TMPDIR/c.py\" %s dgram:%s\n", pyUnixConnect, sb.Info().Python, strings.Join(targets, " "), dgram)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: script.String(), Timeout: 45 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			out := res.Stdout + res.Stderr
			t.Logf("inside:\n%s", out)
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "curl 0 ") || strings.Contains(line, "ApiVersion") {
					t.Errorf("curl reached a host socket from the %s tier: %s", sb.Info().Isolation, line)
				}
				if strings.HasPrefix(line, "connected ") || strings.HasPrefix(line, "sent ") {
					t.Errorf("Python's socket.AF_UNIX reached a host socket from the %s tier: %s", sb.Info().Isolation, line)
				}
			}
			for _, p := range targets {
				if !strings.Contains(out, "refused "+p+" ") && !strings.Contains(out, "connected "+p+"\n") {
					t.Errorf("the Python probe of %s did not run:\n%s", p, out)
				}
			}
			if !strings.Contains(out, "refused stream-pair-sendto "+dgram) {
				t.Errorf("the datagram probes did not run:\n%s", out)
			}
			select {
			case <-hits:
				t.Errorf("the test's host socket %s accepted a connection from the sandbox", own)
			case <-dgramHits:
				t.Errorf("the test's host datagram socket %s received a datagram from the sandbox", dgram)
			case <-time.After(50 * time.Millisecond):
			}
			for _, g := range sb.Info().Gaps {
				if strings.Contains(g, "unix socket") {
					t.Errorf("Info().Gaps still admits unix sockets: %q", g)
				}
			}
		})
	}
}

// pyUnixCost exercises what Python programs use unix sockets for, each
// line "NAME ok ..." or "NAME fails ERROR".
const pyUnixCost = `import asyncio, multiprocessing as mp, os, socket, sys, tempfile, traceback

def sq(x):
    return x * x

def put(q):
    q.put("from-child")

async def echo():
    p = await asyncio.create_subprocess_exec("echo", "sub", stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate()
    return out.decode().strip()

def manager():
    with mp.Manager() as m:
        d = m.dict(a=1)
        return d["a"]

def forkserver():
    with mp.get_context("forkserver").Pool(1) as p:
        return p.map(sq, [3])

def pool():
    with mp.Pool(2) as p:
        return p.map(sq, [1, 2, 3])

def queue():
    q = mp.Queue()
    pr = mp.Process(target=put, args=(q,))
    pr.start()
    v = q.get(timeout=20)
    pr.join()
    return v

def pipe():
    a, b = mp.Pipe()
    a.send("x")
    return b.recv()

def process():
    a, b = mp.Pipe()
    pr = mp.Process(target=b.send, args=("from-child",))
    pr.start()
    v = a.recv()
    pr.join()
    return v

def pair():
    a, b = socket.socketpair()
    a.sendall(b"y")
    return b.recv(1).decode()

def server():
    path = os.path.join(tempfile.gettempdir(), "own.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    return "connected"

if __name__ == "__main__":
    print("start-method", mp.get_start_method())
    for name, f in [("process", process), ("pool", pool), ("queue", queue), ("pipe", pipe), ("socketpair", pair),
                    ("asyncio-subprocess", lambda: asyncio.run(echo())),
                    ("manager", manager), ("forkserver", forkserver), ("unix-server", server)]:
        try:
            print(name, "ok", f(), flush=True)
        except Exception as e:
            where = os.path.basename(traceback.extract_tb(e.__traceback__)[-1].filename)
            print(name, "fails", type(e).__name__, "in", where, flush=True)
`

// sshBanner listens on the host's 127.0.0.1 like an SSH server that says
// its version and hangs up: enough for ssh -v to show that it reached the
// server's protocol. It returns the port.
func sshBanner(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-sandboxkit-banner\r\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// TestLandlockTierUnixSocketCost asserts what the landlock tier's unix
// socket wall costs (issue 25): below Landlock ABI 9 it refuses
// socket(AF_UNIX), so Python's multiprocessing.Manager and a program's own
// unix-socket server fail, while multiprocessing's default start method
// (fork on Linux) with Process and Pipe, socketpair and asyncio
// subprocesses keep working; ssh and git over ssh need TCP, so they reach a
// server exactly where the network is allowed. Pool, Queue and the
// forkserver start method fail on this tier either way: they need POSIX
// semaphores in /dev/shm (measured on the code before the wall, too).
func TestLandlockTierUnixSocketCost(t *testing.T) {
	for _, network := range []bool{false, true} {
		t.Run(fmt.Sprintf("network=%v", network), func(t *testing.T) {
			var opts []sandbox.Option
			if network {
				opts = append(opts, sandbox.WithNetwork())
			}
			sb := newLandlockTier(t, opts...)
			if sb.Info().Python == "" {
				sandboxtest.Unavailable(t, "python", "no python3 in the sandbox")
			}
			// The sandbox's own Python kernel talks to the agent over
			// pipes: the wall leaves it working.
			if ex, err := sb.Python.Run(context.Background(), "import multiprocessing\nprint(6*7)", sandbox.PythonRunOptions{}); err != nil || ex.Stdout != "42\n" {
				t.Errorf("the Python kernel on the landlock tier: %v %+v", err, ex)
			}
			port := sshBanner(t)
			abi := 0
			for _, c := range sb.Info().Controls {
				if c.Name == "unix_sockets" {
					fmt.Sscanf(c.Mechanism[strings.Index(c.Mechanism, "ABI")+4:], "%d", &abi)
				}
			}
			script := fmt.Sprintf(`cat > "$TMPDIR/cost.py" <<'EOF'
%sEOF
%s "$TMPDIR/cost.py"
for tool in ssh git; do command -v $tool >/dev/null || echo "$tool missing"; done
reached() { if grep -q 'remote software version sandboxkit-banner' "$1"; then echo "$2 reached"; elif grep -q 'No user exists for uid' "$1"; then echo "$2 no-passwd-entry"; else echo "$2 no"; sed 's/^/  /' "$1"; fi; }
ssh -v -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -p %d 127.0.0.1 true >"$TMPDIR/ssh.out" 2>&1; reached "$TMPDIR/ssh.out" ssh
GIT_SSH_COMMAND="ssh -v -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null" git ls-remote ssh://git@127.0.0.1:%[3]d/repo >"$TMPDIR/git.out" 2>&1; reached "$TMPDIR/git.out" git-ssh
`, pyUnixCost, sb.Info().Python, port)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: script, Timeout: 90 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			out := res.Stdout + res.Stderr
			t.Logf("Landlock ABI %d, network %v:\n%s", abi, network, out)
			if strings.Contains(out, " missing") {
				t.Fatalf("ssh or git is missing on this machine:\n%s", out)
			}
			want := []string{"start-method fork", "process ok from-child", "pipe ok x", "socketpair ok y", "asyncio-subprocess ok sub",
				// POSIX semaphores (sem_open) need a file in /dev/shm, where
				// the landlock tier lets nothing be created: a Pool or a
				// Queue fails there with or without unix sockets.
				"pool fails PermissionError in synchronize.py", "queue fails PermissionError in synchronize.py", "forkserver fails"}
			if abi >= 9 {
				want = append(want, "manager ok 1", "unix-server ok connected")
			} else {
				// The server process gets EACCES from socket(AF_UNIX), its
				// parent an EOF.
				want = append(want, "manager fails", "unix-server fails PermissionError in socket.py")
			}
			switch {
			case network && strings.Contains(out, "ssh no-passwd-entry"):
				// As root the sandbox runs as a fresh uid that has no
				// passwd entry, and ssh refuses to start without one;
				// the unprivileged run (the landlock tier's real users)
				// checks that ssh and git get through.
				t.Logf("ssh cannot run as the sandbox's uid %s (no passwd entry)", sb.Info().Extra["host_uid"])
			case network:
				want = append(want, "ssh reached", "git-ssh reached")
			case strings.Contains(out, "ssh reached"):
				t.Errorf("without network, ssh reached the host's 127.0.0.1")
			}
			for _, w := range want {
				if !strings.Contains(out, w+"\n") && !strings.Contains(out, w+" ") {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}
