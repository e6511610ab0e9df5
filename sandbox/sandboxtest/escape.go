package sandboxtest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// RunEscape runs hostile probes inside the sandboxes newSandbox creates.
// Each probe is a shell script that prints ESCAPED:<what> when an attack
// succeeds; every probe must print none, and the host must be unchanged
// afterwards (canary files outside the workspace keep their content, host
// listeners see no connection, no process of the sandbox survives Close).
//
// Network probes only ever target listeners this suite starts on the
// host's 127.0.0.1 and a unix socket in a host temporary directory: a
// sandbox that shares the host's network stack reaches them, an isolated
// one must not. Run it only against backends that claim isolation:
// Info().Isolation of namespace or stronger, where every probe runs and
// must fail; or a weaker tier (landlock), where a probe runs only when the
// sandbox claims the control it attacks (Info().Controls reports it
// enforced and no Info().Gaps entry admits the weakness), and is skipped,
// naming the gap, otherwise.
func RunEscape(t *testing.T, newSandbox Factory) {
	host := newEscapeHost(t)
	t.Run("Env", func(t *testing.T) {
		// Not parallel: t.Setenv.
		t.Setenv("OPENAI_API_KEY", "sk-sandboxkit-escape-canary")
		b := open(t, newSandbox)
		out := escapeRun(t, b, `env | grep -q sk-sandboxkit-escape-canary && echo ESCAPED:env; cat /proc/1/environ 2>/dev/null | tr '\0' '\n' | grep -q sk-sandboxkit && echo ESCAPED:agent-env; echo done`)
		wantClean(t, out)
	})
	// The probes run in parallel inside one group, which returns only
	// when all of them have finished, so that HostUnchanged sees what
	// they did (a parallel subtest of t itself would run after it).
	t.Run("Probes", func(t *testing.T) { runEscapeProbes(t, newSandbox, host) })
	t.Run("HostUnchanged", func(t *testing.T) {
		host.check(t)
	})
}

// runEscapeProbes runs every probe as a parallel subtest of t.
func runEscapeProbes(t *testing.T, newSandbox Factory, host *escapeHost) {
	for _, p := range escapeProbes(host) {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			b := open(t, newSandbox, p.opts...)
			if why := p.unclaimed(b.sb.Info()); why != "" {
				if b.sb.Info().Isolation >= sandbox.TierNamespace {
					t.Fatalf("a %s sandbox must resist every probe, but %s", b.sb.Info().Isolation, why)
				}
				t.Skipf("not claimed by the %s tier: %s", b.sb.Info().Isolation, why)
			}
			if p.needPython && b.sb.Info().Python == "" {
				t.Skip("no python3 inside the sandbox")
			}
			script := strings.ReplaceAll(p.script, "$PY", b.sb.Info().Python)
			script = strings.ReplaceAll(script, "$MARKER", b.marker)
			out := escapeRun(t, b, script)
			wantClean(t, out)
			for _, w := range p.want {
				if !strings.Contains(out, w) {
					t.Errorf("probe output lacks %q (the probe did not run as intended):\n%s", w, out)
				}
			}
			if p.post != nil {
				p.post(t, b, out)
			}
			if p.usable {
				b.usable()
			}
		})
	}
}

// escapeProbe is one attack.
type escapeProbe struct {
	name       string
	opts       []sandbox.Option
	script     string   // $PY is python3 inside, $MARKER the subtest's process marker
	want       []string // output that shows the probe really ran
	needPython bool
	usable     bool // the sandbox must still work afterwards
	// post, when set, checks the output further.
	post func(t *testing.T, b *box, out string)
	// control is the Info control the probe attacks ("" for none: every
	// isolating tier claims it); gap, when set, is the text of an
	// Info().Gaps entry that admits the probe would succeed.
	control, gap string
}

// unclaimed says why a sandbox does not claim to stop p, or "" if it does.
func (p escapeProbe) unclaimed(info sandbox.Info) string {
	if p.control != "" {
		found := false
		for _, c := range info.Controls {
			if c.Name == p.control {
				found = true
				if !c.Enforced {
					return fmt.Sprintf("control %q is not enforced (%s)", p.control, c.Mechanism)
				}
			}
		}
		if !found {
			return fmt.Sprintf("control %q is not reported", p.control)
		}
	}
	if p.gap != "" {
		for _, g := range info.Gaps {
			if strings.Contains(g, p.gap) {
				return "a documented gap: " + g
			}
		}
	}
	return ""
}

// escapeHost is what the probes attack on the host.
type escapeHost struct {
	dir      string // host temp dir (mode 0777) with canaries and the unix socket
	canary   string
	sock     string
	tcp, udp int
	hits     chan string
}

const canaryText = "sandboxkit escape canary\n"

func newEscapeHost(t *testing.T) *escapeHost {
	t.Helper()
	dir, err := os.MkdirTemp("", "sandboxkit-escape-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	h := &escapeHost{dir: dir, canary: filepath.Join(dir, "canary"), sock: filepath.Join(dir, "host.sock"), hits: make(chan string, 64)}
	if err := os.WriteFile(h.canary, []byte(canaryText), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(h.canary, 0o666) // writable by anyone: only the boundary protects it
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ul, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xl, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(h.sock, 0o777)
	h.tcp, h.udp = tl.Addr().(*net.TCPAddr).Port, ul.LocalAddr().(*net.UDPAddr).Port
	accept := func(l net.Listener, name string) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.hits <- name
			c.Close()
		}
	}
	done := make(chan struct{}, 3)
	go func() { accept(tl, "tcp"); done <- struct{}{} }()
	go func() { accept(xl, "unix"); done <- struct{}{} }()
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := ul.ReadFrom(buf); err != nil {
				break
			}
			h.hits <- "udp"
		}
		done <- struct{}{}
	}()
	t.Cleanup(func() {
		tl.Close()
		ul.Close()
		xl.Close()
		for range 3 {
			<-done
		}
		os.RemoveAll(dir)
	})
	return h
}

// check fails if any probe reached a listener or changed a canary.
func (h *escapeHost) check(t *testing.T) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	for {
		select {
		case what := <-h.hits:
			t.Errorf("a sandbox reached the host's %s listener", what)
			continue
		default:
		}
		break
	}
	if b, err := os.ReadFile(h.canary); err != nil || string(b) != canaryText {
		t.Errorf("host canary %s changed: %q, %v", h.canary, b, err)
	}
	ents, _ := os.ReadDir(h.dir)
	for _, e := range ents {
		if e.Name() != "canary" && e.Name() != "host.sock" {
			t.Errorf("a sandbox created %s in the host's temporary directory", e.Name())
		}
	}
	for _, p := range []string{"/etc/sandboxkit-escape", "/usr/sandboxkit-escape", "/sandboxkit-escape", "/root/sandboxkit-escape", "/tmp/sandboxkit-escape"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("a sandbox created %s on the host", p)
			os.Remove(p)
		}
	}
}

func escapeRun(t *testing.T, b *box, script string) string {
	t.Helper()
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: "exec 2>&1\n" + script, Timeout: 45 * time.Second})
	if err != nil {
		t.Fatalf("running the probe: %v", err)
	}
	return res.Stdout + res.Stderr
}

func wantClean(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(out, "ESCAPED:") {
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "ESCAPED:") {
				lines = append(lines, l)
			}
		}
		t.Errorf("the attack succeeded: %s\nfull output:\n%s", strings.Join(lines, "; "), out)
	}
}

// pySyscalls prints ESCAPED:<name> for each raw syscall that does not fail.
const pySyscalls = `cat > "${TMPDIR:-/tmp}/sys.py" <<'PYEOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
calls = {
    "unshare-user": (272, CLONE_NEWUSER),
    "unshare-mount": (272, CLONE_NEWNS),
    "setns": (308, os.open("/proc/self/ns/net", os.O_RDONLY) if os.path.exists("/proc/self/ns/net") else 0, 0),
    "ptrace-traceme": (101, 0, 0, 0, 0),
    "bpf": (321, 0, 0, 0),
    "keyctl": (250, 0, 0, 0),
    "add_key": (248, b"user", b"k", b"v", 1, -3),
    "userfaultfd": (323, 0),
    "io_uring_setup": (425, 1, ctypes.create_string_buffer(120)),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "mount": (165, b"none", b"/", None, 0x1000 | 0x20, None),
}
for name, args in calls.items():
    r = libc.syscall(*args)
    e = ctypes.get_errno()
    if r >= 0:
        print("ESCAPED:" + name)
    else:
        print(name, os.strerror(e))
r = libc.syscall(435, 0, 0)
print("clone3", os.strerror(ctypes.get_errno()))
PYEOF
$PY "${TMPDIR:-/tmp}/sys.py"`

// pyNet tries to reach the host's listeners; a success prints ESCAPED.
const pyNet = `cat > "${TMPDIR:-/tmp}/net.py" <<'PYEOF'
import socket, sys
tcp, udp = int(sys.argv[1]), int(sys.argv[2])
sock = sys.argv[3] if len(sys.argv) > 3 else ""
def attempt(name, fam, typ, proto, addr, send=False):
    try:
        s = socket.socket(fam, typ, proto)
        s.settimeout(1)
        if send:
            s.sendto(b"x", addr)
            print(name, "sent (the host listener decides)")
            return
        s.connect(addr)
        print("ESCAPED:" + name)
    except Exception as e:
        print(name, "refused:", type(e).__name__)
attempt("python-tcp", socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", tcp))
attempt("python-mptcp", socket.AF_INET, socket.SOCK_STREAM, 262, ("127.0.0.1", tcp))
attempt("python-udp", socket.AF_INET, socket.SOCK_DGRAM, 0, ("127.0.0.1", udp), True)
if sock:
    attempt("host-unix-socket", socket.AF_UNIX, socket.SOCK_STREAM, 0, sock)
    attempt("docker-socket", socket.AF_UNIX, socket.SOCK_STREAM, 0, "/var/run/docker.sock")
PYEOF
$PY "${TMPDIR:-/tmp}/net.py" %d %d %s; echo net-done`

func escapeProbes(h *escapeHost) []escapeProbe {
	return []escapeProbe{
		{name: "NetworkPython", needPython: true, want: []string{"net-done", "python-tcp refused"}, control: "network",
			script: fmt.Sprintf(pyNet, h.tcp, h.udp, "")},
		// The host's Docker socket is host root for a user in the docker
		// group (issue 25: curl reached the engine from the landlock tier).
		{name: "UnixSockets", needPython: true, want: []string{"net-done", "host-unix-socket refused", "curl-unix-done"}, control: "network", gap: "unix sockets",
			script: fmt.Sprintf(pyNet, h.tcp, h.udp, h.sock) + fmt.Sprintf(`
command -v curl >/dev/null && { curl -s -m 2 --unix-socket %s http://x/ >/dev/null 2>&1; curl -s -m 2 --unix-socket /var/run/docker.sock http://x/version 2>/dev/null | grep -q ApiVersion && echo ESCAPED:curl-docker-socket; }; echo curl-unix-done`, h.sock)},
		{name: "NetworkCurl", control: "network", want: []string{"curl-done"},
			script: fmt.Sprintf(`command -v curl >/dev/null || { echo curl-done; exit 0; }; curl -s -m 2 -o /dev/null http://127.0.0.1:%d/ && echo ESCAPED:curl; echo curl-done`, h.tcp)},
		{name: "NetworkBashDevTCP", control: "network", want: []string{"bash-done"},
			script: fmt.Sprintf(`command -v bash >/dev/null || { echo bash-done; exit 0; }; bash -c 'echo x > /dev/tcp/127.0.0.1/%d' 2>/dev/null && echo ESCAPED:dev-tcp; bash -c 'echo x > /dev/udp/127.0.0.1/%d' 2>/dev/null; echo bash-done`, h.tcp, h.udp)},
		{name: "WriteSystemPaths", control: "filesystem", want: []string{"writes-done"},
			script: `for p in /etc /usr /root /; do echo x > $p/sandboxkit-escape 2>/dev/null && echo ESCAPED:write-$p; done; echo writes-done`},
		{name: "WriteHostTmp", control: "filesystem", want: []string{"hosttmp-done"},
			script: fmt.Sprintf(`echo pwned > %s 2>/dev/null && grep -q pwned %[1]s 2>/dev/null && echo ESCAPED:host-canary; echo x > %s/new 2>/dev/null && echo ESCAPED:host-tmp-create; echo x > /tmp/sandboxkit-escape; echo hosttmp-done`, h.canary, h.dir)},
		{name: "ReadSecrets", control: "filesystem", want: []string{"read-done"},
			script: `head -c1 /etc/shadow >/dev/null 2>&1 && echo ESCAPED:shadow; head -c1 /etc/gshadow >/dev/null 2>&1 && echo ESCAPED:gshadow; ls /root/ 2>/dev/null | grep -q . && echo ESCAPED:list-root; cat /root/.bashrc >/dev/null 2>&1 && echo ESCAPED:read-root; echo read-done`},
		{name: "SymlinkAndHardlink", control: "filesystem", want: []string{"links-done"},
			script: fmt.Sprintf(`ln -s %s link 2>/dev/null; echo pwned > link 2>/dev/null; grep -q pwned %[1]s 2>/dev/null && echo ESCAPED:symlink-write; ln -s /etc/shadow s 2>/dev/null; head -c1 s >/dev/null 2>&1 && echo ESCAPED:symlink-read; ln /etc/passwd hard 2>/dev/null && echo ESCAPED:hardlink-passwd; ln %[1]s hard2 2>/dev/null && echo ESCAPED:hardlink-canary; echo links-done`, h.canary)},
		{name: "RemountReadWrite", control: "privileges", want: []string{"mount-done"},
			script: `mount -o remount,bind,rw /usr 2>/dev/null && echo ESCAPED:remount; mount -t tmpfs none /mnt 2>/dev/null && echo ESCAPED:mount-tmpfs; echo x > /usr/sandboxkit-escape 2>/dev/null && echo ESCAPED:usr-write; echo mount-done`},
		{name: "Mknod", control: "privileges", want: []string{"mknod-done"},
			script: `mknod sda b 8 0 2>/dev/null && { head -c1 sda >/dev/null 2>&1 && echo ESCAPED:block-device; }; mknod mem c 1 1 2>/dev/null && { head -c1 mem >/dev/null 2>&1 && echo ESCAPED:dev-mem; }; echo mknod-done`},
		{name: "DangerousSyscalls", needPython: true, control: "syscalls", want: []string{"clone3 Function not implemented", "bpf Operation not permitted"},
			script: pySyscalls},
		{name: "UnshareSetuid", control: "privileges", want: []string{"setuid-done"},
			script: `command -v unshare >/dev/null && unshare -Ur true 2>/dev/null && echo ESCAPED:unshare-user; command -v su >/dev/null && su -c 'grep CapEff /proc/self/status' root </dev/null 2>/dev/null | grep -qv 'CapEff:[[:space:]]*0000000000000000' && echo ESCAPED:setuid-caps; grep -q 'CapEff:[[:space:]]*0000000000000000' /proc/self/status || echo ESCAPED:caps; echo setuid-done`},
		{name: "AgentInternals", control: "privileges", want: []string{"agent-done"},
			// The agent is the command's parent and runs as its uid: its
			// pipes (the protocol stream in a container) and memory must
			// still be out of reach. (Listing the descriptor numbers may
			// work where the agent's /proc directory is the command's uid's;
			// following them may not.)
			script: `a=$PPID; for f in /proc/$a/fd/*; do readlink "$f" >/dev/null 2>&1 && echo ESCAPED:agent-fd-readlink; echo x 2>/dev/null >"$f" && echo ESCAPED:agent-fd-write; done 2>/dev/null; head -c1 /proc/$a/environ >/dev/null 2>&1 && echo ESCAPED:agent-environ; head -c1 /proc/$a/mem >/dev/null 2>&1 && echo ESCAPED:agent-mem; echo agent-done`},
		{name: "HostProcesses", control: "signals", want: []string{"pids-done"},
			script: fmt.Sprintf(`kill -0 %d 2>/dev/null && echo ESCAPED:signal-host; kill -STOP %[1]d 2>/dev/null && echo ESCAPED:stop-host; [ -e /proc/%[1]d/status ] && grep -q '^Name:.*test' /proc/%[1]d/status && echo host-pid-visible; echo pids-done`, os.Getpid()),
			post: func(t *testing.T, b *box, out string) {
				if !strings.Contains(out, "host-pid-visible") {
					return
				}
				for _, c := range b.sb.Info().Controls {
					if c.Name == "processes_visible" && c.Enforced {
						t.Errorf("the host's pid %d is visible although Info says %q", os.Getpid(), c.Mechanism)
					}
				}
			}},
		{name: "ForkBomb", usable: true, want: []string{"bomb-done"}, control: "pids", needPython: true,
			opts: []sandbox.Option{sandbox.WithLimits(sandbox.Limits{Pids: 64})},
			post: func(t *testing.T, b *box, out string) {
				// The bomb must really have run into the limit.
				var n int
				if i := strings.Index(out, "procs="); i < 0 {
					t.Errorf("the probe did not count processes:\n%s", out)
				} else if fmt.Sscan(out[i+len("procs="):], &n); n < 32 {
					t.Errorf("the fork bomb reached only %d processes with a limit of 64: it did not run", n)
				} else {
					t.Logf("the fork bomb peaked at %d processes with a limit of 64", n)
				}
			},
			// The bomb runs in its own process group, which the probe
			// kills afterwards so the sandbox can be checked for use. Every
			// bomb process forks in a loop and, when a fork fails, waits
			// and tries again: it never exits, so once the bomb has filled
			// the limit it holds it full until it is killed, whatever the
			// scheduler does. Shell bombs do not: dash exits on a failed
			// fork, so a shell bomb at the limit sheds processes, and its
			// tree can die out entirely. The classic ':|:&' collapsed
			// within milliseconds (the probe counted 3 to 50 processes from
			// run to run); the "waiting" bomb (bomb & bomb & wait) still
			// died out now and then under load: 2 of 20 Docker runs under
			// .ci/stress/bombs.sh counted only 14 and 16 processes, the
			// probe, starved of CPU, sampling before the peak and after the
			// collapse. Once the bomb runs, the probe shares the full pids
			// limit with it, so it forks nothing: it keeps time with
			// /proc/uptime and counts with shell builtins, keeping the
			// largest count; it runs at least 2 s (time to push past the
			// limit) and until it has seen the bomb near the limit, at most
			// 30 s.
			script: `read t0 _ < /proc/uptime; t0=${t0%.*}
setsid $PY -c '
import os, time
with open("bomb.pid", "w") as f: f.write(str(os.getpid()))
while True:
    try: os.fork()
    except OSError: time.sleep(0.05)
' >/dev/null 2>&1 &
max=0
while :; do n=0; for p in /proc/[0-9]*; do [ -O "$p" ] && n=$((n+1)); done; [ "$n" -gt "$max" ] && max=$n
read t _ < /proc/uptime; t=${t%.*}
[ $((t-t0)) -ge 2 ] && [ "$max" -ge 32 ] && break; [ $((t-t0)) -ge 30 ] && break; done
[ "$max" -gt 128 ] && echo ESCAPED:pids-$max; echo procs=$max
read pid < bomb.pid; for i in 1 2 3 4 5 6 7 8 9 10; do kill -9 -$pid 2>/dev/null; done; echo bomb-done`},
		{name: "MemoryBomb", needPython: true, usable: true, want: []string{"mem-done"}, control: "memory",
			opts:   []sandbox.Option{sandbox.WithLimits(sandbox.Limits{MemoryBytes: 256 << 20, TmpBytes: 32 << 20})},
			script: `$PY -c 'b = bytearray(1 << 30); print("ESCAPED:allocated-1GiB")'; echo mem-done`},
		{name: "DiskFill", usable: true, want: []string{"disk-done", "No space left"}, control: "disk",
			opts:   []sandbox.Option{sandbox.WithLimits(sandbox.Limits{DiskBytes: 8 << 20})},
			script: `dd if=/dev/zero of=fill bs=1M count=32 && echo ESCAPED:disk-quota; rm -f fill; echo disk-done`},
		{name: "CPUSpin", usable: true, want: []string{"cpu-done"}, control: "cpu",
			opts:   []sandbox.Option{sandbox.WithLimits(sandbox.Limits{CPUSeconds: 1})},
			script: `start=$(date +%s); sh -c 'while :; do :; done'; end=$(date +%s); [ $((end-start)) -gt 20 ] && echo ESCAPED:cpu-limit; echo cpu-done`},
		{name: "SetsidDaemon", want: []string{"daemon-started"}, control: "lifetime",
			// open's cleanup closes the sandbox and fails if a process with
			// the marker survives.
			script: `setsid sleep $MARKER </dev/null >/dev/null 2>&1 & (setsid sh -c 'sleep $MARKER' </dev/null >/dev/null 2>&1 &); echo daemon-started`},
		egressProbe(h),
	}
}
