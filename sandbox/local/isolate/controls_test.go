//go:build linux

package isolate

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// probeCase is one shell probe and what its output must show.
type probeCase struct {
	name  string
	probe string
	want  []string // substrings the output must contain
	deny  []string // substrings it must not contain
}

func runCases(t *testing.T, spec func(t *testing.T) Spec, cases []probeCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _ := run(t, spec(t), "exec 2>&1\n"+c.probe)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, d := range c.deny {
				if strings.Contains(out, d) {
					t.Errorf("output has %q:\n%s", d, out)
				}
			}
		})
	}
}

func nsSpec(t *testing.T) Spec { return newSpec(t, driver.TierNamespace) }

func TestNamespacePrivilegesAreGone(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	runCases(t, nsSpec, []probeCase{
		{name: "no capabilities, no_new_privs, seccomp filter",
			probe: "grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status",
			want: []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000",
				"CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"}},
		{name: "a setuid binary does not give root powers",
			probe: "su -c 'id' nobody; grep CapEff /proc/self/status; cat /etc/shadow >/dev/null && echo SHADOW",
			want:  []string{"CapEff:\t0000000000000000"}, deny: []string{"SHADOW"}},
		{name: "mount remount rw of a read-only bind fails",
			probe: "mount -o remount,bind,rw /usr && echo REMOUNTED; touch /usr/x && echo WROTE",
			deny:  []string{"REMOUNTED", "WROTE"}},
		{name: "unshare cannot regain capabilities",
			probe: "unshare -Ur id && echo UNSHARED", deny: []string{"UNSHARED"}},
		{name: "mknod of a device fails",
			probe: "mknod /tmp/sda b 8 0 && echo MADE", deny: []string{"MADE"}},
	})
	t.Run("raw syscalls fail with the expected errno", func(t *testing.T) {
		out, code := run(t, nsSpec(t), "go:syscalls")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, out)
		}
		want := map[string]string{
			"mount": "EPERM", "umount2": "EPERM", "unshare": "EPERM", "setns": "EPERM", "ptrace": "EPERM",
			"bpf": "EPERM", "keyctl": "EPERM", "userfaultfd": "EPERM", "io_uring_setup": "EPERM",
			"perf_event_open": "EPERM", "clone_newns": "EPERM", "clone3": "ENOSYS", "chroot": "EPERM", "open_tree": "EPERM",
		}
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 {
				got[f[0]] = f[1]
			}
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: got %q, want %s", name, got[name], w)
			}
		}
	})
}

func TestNamespaceFilesystemView(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	runCases(t, nsSpec, []probeCase{
		{name: "system directories are read-only",
			probe: "for f in /etc/x /usr/x /x /bin/x /dev/x; do touch $f && echo WROTE $f; done; echo done",
			want:  []string{"done"}, deny: []string{"WROTE"}},
		{name: "workspace and tmp are writable",
			probe: "echo a > /workspace/f && echo a > /tmp/f && mkdir /workspace/d /tmp/d && echo OK",
			want:  []string{"OK"}},
		{name: "shadow is unreadable",
			probe: "cat /etc/shadow && echo READ; head -c1 /etc/gshadow && echo READ", deny: []string{"READ"}},
		{name: "home, root, var and the host tmp are absent",
			probe: "ls -d /root /home /var/log /sys /run 2>&1; ls /tmp | wc -l",
			want:  []string{"/root': No such file", "/home': No such file", "/var/log': No such file", "/sys': No such file"}},
		{name: "hardlink to a read-only file fails",
			probe: "ln /etc/passwd /workspace/p && echo LINKED", deny: []string{"LINKED"}},
		{name: "the environment is not inherited",
			probe: "env", deny: []string{"OPENAI_API_KEY", "GOPATH"}},
		{name: "hostname is the sandbox's",
			probe: "hostname", want: []string{"sandbox"}},
	})
	t.Run("host file outside the workspace is unchanged", func(t *testing.T) {
		spec := nsSpec(t)
		outside := hostFile(t, filepath.Dir(spec.HostWorkspace), filepath.Base(spec.HostWorkspace)+".outside", "host")
		t.Cleanup(func() { os.Remove(outside) })
		hostFile(t, spec.HostWorkspace, "mine", "seed")
		probe := fmt.Sprintf("cat /workspace/mine; ln -s %s /workspace/esc; echo x > /workspace/esc; echo y > ../%s; ln -s /etc /workspace/etc; echo z > /workspace/etc/passwd2; echo ran",
			outside, filepath.Base(outside))
		out, _ := run(t, spec, "exec 2>&1\n"+probe)
		if !strings.Contains(out, "seed") || !strings.Contains(out, "ran") {
			t.Fatalf("probe did not run as expected: %s", out)
		}
		if b, _ := os.ReadFile(outside); string(b) != "host" {
			t.Errorf("host file changed to %q", b)
		}
		if _, err := os.Stat("/etc/passwd2"); err == nil {
			t.Errorf("sandbox created /etc/passwd2 on the host")
		}
	})
}

func TestNamespaceHidesHostProcesses(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	runCases(t, nsSpec, []probeCase{
		{name: "ps shows only sandbox pids",
			probe: "ps -e -o pid= | wc -l; ps -e -o pid=",
			want:  []string{"1\n"}, deny: []string{strconv.Itoa(os.Getpid()) + "\n"}},
		{name: "host pid cannot be signalled",
			probe: fmt.Sprintf("kill -0 %d && echo SIGNALLED", os.Getpid()), deny: []string{"SIGNALLED"}},
	})
	t.Run("ps count", func(t *testing.T) {
		out, _ := run(t, nsSpec(t), "ls /proc | grep -c '^[0-9]'")
		if n, _ := strconv.Atoi(strings.TrimSpace(out)); n < 2 || n > 4 {
			t.Errorf("want only the agent, sh and ls in /proc, got %d", n)
		}
	})
}

// listeners starts TCP and UDP listeners on 127.0.0.1 and a unix socket in
// a host directory; it reports on done whether anything reached them.
func listeners(t *testing.T) (tcpPort, udpPort int, unixPath string, reached func() []string) {
	t.Helper()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ul, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "isolate-sock-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	unixPath = filepath.Join(dir, "host.sock")
	xl, err := net.Listen("unix", unixPath)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(unixPath, 0o777)
	hits := make(chan string, 16)
	acceptAll := func(l net.Listener, name string) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			hits <- name
			c.Close()
		}
	}
	go acceptAll(tl, "tcp")
	go acceptAll(xl, "unix")
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := ul.ReadFrom(buf); err != nil {
				return
			}
			hits <- "udp"
		}
	}()
	t.Cleanup(func() { tl.Close(); ul.Close(); xl.Close(); os.RemoveAll(dir) })
	reached = func() []string {
		time.Sleep(50 * time.Millisecond)
		var got []string
		for {
			select {
			case h := <-hits:
				got = append(got, h)
			default:
				return got
			}
		}
	}
	return tl.Addr().(*net.TCPAddr).Port, ul.LocalAddr().(*net.UDPAddr).Port, unixPath, reached
}

// netProbe tries every way to reach the host listeners; each attempt
// prints NAME:ok or NAME:fail.
func netProbe(tcp, udp int, sock string) string {
	py := fmt.Sprintf(`
import socket
def t(name, fam, typ, proto, addr, send=False):
    try:
        s = socket.socket(fam, typ, proto); s.settimeout(1)
        if send: s.sendto(b"x", addr)
        else: s.connect(addr)
        print(name + ":ok")
    except Exception as e:
        print(name + ":fail", type(e).__name__)
t("py-tcp", socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", %d))
t("py-mptcp", socket.AF_INET, socket.SOCK_STREAM, 262, ("127.0.0.1", %d))
t("py-udp", socket.AF_INET, socket.SOCK_DGRAM, 0, ("127.0.0.1", %d), True)
t("py-unix", socket.AF_UNIX, socket.SOCK_STREAM, 0, %q)
`, tcp, tcp, udp, sock)
	return fmt.Sprintf(`cat > $TMPDIR/p.py <<'PYEOF'
%s
PYEOF
/usr/bin/python3 $TMPDIR/p.py
curl -s -m 1 http://127.0.0.1:%d/ >/dev/null; [ $? -eq 7 -o $? -eq 28 ] && echo curl:fail || echo curl:other
bash -c 'echo x > /dev/tcp/127.0.0.1/%d' 2>/dev/null && echo devtcp:ok || echo devtcp:fail
cat /proc/net/dev | tail -n +3 | cut -d: -f1`, py, tcp, tcp)
}

func TestNamespaceHasNoNetwork(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	tcp, udp, sock, reached := listeners(t)
	out, _ := run(t, nsSpec(t), "exec 2>&1\n"+netProbe(tcp, udp, sock))
	for _, name := range []string{"py-tcp", "py-mptcp", "py-unix", "curl", "devtcp"} {
		if !strings.Contains(out, name+":fail") {
			t.Errorf("%s was not refused:\n%s", name, out)
		}
	}
	if got := reached(); len(got) > 0 {
		t.Errorf("host listeners were reached: %v\n%s", got, out)
	}
	if ifaces := strings.Fields(out[strings.LastIndex(out, "devtcp:"):])[1:]; len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("interfaces inside: %v, want only lo", ifaces)
	}

	// The same probes with the network allowed reach the listeners: they
	// are able to detect a sandbox that shares the host's network.
	spec := nsSpec(t)
	spec.Network = true
	out, _ = run(t, spec, "exec 2>&1\n"+netProbe(tcp, udp, sock))
	for _, name := range []string{"py-tcp", "py-mptcp", "devtcp"} {
		if !strings.Contains(out, name+":ok") {
			t.Errorf("with network allowed, %s did not connect:\n%s", name, out)
		}
	}
	got := strings.Join(reached(), " ")
	if !strings.Contains(got, "tcp") || !strings.Contains(got, "udp") {
		t.Errorf("with network allowed, the listeners saw %q", got)
	}
}

func TestNamespaceLimits(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	cases := []struct {
		name   string
		limits driver.Limits
		probe  string
		want   []string
	}{
		{"tmp is full at its size", driver.Limits{TmpBytes: 4 << 20},
			"dd if=/dev/zero of=/tmp/f bs=1M count=8; echo rc=$?", []string{"No space left on device", "rc=1"}},
		{"workspace is full at the disk quota", driver.Limits{DiskBytes: 4 << 20},
			"dd if=/dev/zero of=/workspace/f bs=1M count=8; echo rc=$?", []string{"No space left on device", "rc=1"}},
		{"file size limit", driver.Limits{FileSizeBytes: 1 << 20},
			"dd if=/dev/zero of=/tmp/f bs=1M count=2; echo rc=$?", []string{"rc=153"}},
		{"fork bomb stops at the pids limit and the sandbox stays usable", driver.Limits{Pids: 20}, forkBomb,
			[]string{"stopped EAGAIN", "usable"}},
		{"cpu spin is killed at the cpu limit", driver.Limits{CPUSeconds: 1},
			"sh -c 'while :; do :; done'; echo rc=$?", []string{"rc=137"}},
		{"memory bomb is stopped and the sandbox stays usable", driver.Limits{MemoryBytes: 400 << 20, TmpBytes: 16 << 20},
			"/usr/bin/python3 -c 'b=bytearray(800<<20); print(\"ALLOCATED\")'; echo rc=$?; echo usable", []string{"usable"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := nsSpec(t)
			spec.Limits = c.limits
			out, _ := run(t, spec, "exec 2>&1\n"+c.probe)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "ALLOCATED") {
				t.Errorf("allocated past the memory limit:\n%s", out)
			}
			if i := strings.Index(out, "procs="); i >= 0 {
				n, _ := strconv.Atoi(strings.Fields(out[i+6:])[0])
				if n > c.limits.Pids+AgentTaskReserve-agentWarmThreads || n < c.limits.Pids-3 {
					t.Errorf("fork bomb reached %d processes with a limit of %d:\n%s", n, c.limits.Pids, out)
				}
			}
		})
	}
}

// forkBomb forks until the kernel refuses, counts the sandbox's
// processes, then shows the sandbox still runs commands.
const forkBomb = `cat > /tmp/bomb.py <<'PYEOF'
import os, time, errno
kids = []
try:
    while len(kids) < 500:
        p = os.fork()
        if p == 0:
            time.sleep(5)
            os._exit(0)
        kids.append(p)
except OSError as e:
    print("stopped", errno.errorcode[e.errno])
print("procs=%d" % sum(1 for d in os.listdir("/proc") if d.isdigit()))
for p in kids:
    os.kill(p, 9)
    os.waitpid(p, 0)
PYEOF
/usr/bin/python3 /tmp/bomb.py
sh -c 'echo usable'`

func TestDiskQuotaWorkspaceRoundTrip(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	spec := nsSpec(t)
	spec.Limits.DiskBytes = 8 << 20
	hostFile(t, spec.HostWorkspace, "seed.txt", "from host\n")
	os.Mkdir(filepath.Join(spec.HostWorkspace, "gone"), 0o755)
	b := start(t, spec, "cat /workspace/seed.txt; echo new > /workspace/new.txt; rmdir /workspace/gone; ln -s /etc/shadow /workspace/link; echo ready; sleep 30")
	if l := b.line(t); l != "from host" {
		t.Fatalf("seeded file reads %q (stderr %s)", l, b.stderr.String())
	}
	if l := b.line(t); l != "ready" {
		t.Fatalf("unexpected %q", l)
	}
	if _, err := os.Stat(filepath.Join(spec.HostWorkspace, "new.txt")); err == nil {
		t.Fatal("the host directory changed before SaveWorkspace")
	}
	if err := b.h.SaveWorkspace(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(spec.HostWorkspace, "new.txt")); string(got) != "new\n" {
		t.Errorf("saved new.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(spec.HostWorkspace, "gone")); err == nil {
		t.Error("a directory removed inside survived SaveWorkspace")
	}
	if l, err := os.Readlink(filepath.Join(spec.HostWorkspace, "link")); err != nil || l != "/etc/shadow" {
		t.Errorf("symlink saved as %q, %v (want the link itself, not the target's content)", l, err)
	}
}

func TestFreezeStopsTheSandbox(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	spec := nsSpec(t)
	b := start(t, spec, "i=0; echo ready; while :; do i=$((i+1)); echo $i > /workspace/c; sleep 0.01; done")
	b.line(t)
	counter := func() string {
		got, _ := os.ReadFile(filepath.Join(spec.HostWorkspace, "c"))
		return string(got)
	}
	// changes polls until the counter differs from old, for at most 3 s.
	changes := func(old string) bool {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if c := counter(); c != old && c != "" {
				return true
			}
		}
		return false
	}
	if !changes("") {
		t.Fatal("the counter never started")
	}
	if err := b.h.Freeze(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // a write in flight lands
	c1 := counter()
	time.Sleep(200 * time.Millisecond)
	if c2 := counter(); c1 != c2 {
		t.Errorf("counter advanced while frozen: %q -> %q", c1, c2)
	}
	if err := b.h.Thaw(); err != nil {
		t.Fatal(err)
	}
	if !changes(c1) {
		t.Errorf("counter did not advance after Thaw: %q", c1)
	}
}

// TestHostSIGKILLLeavesNothing kills a helper host process that runs a
// sandbox with a setsid daemon and a background child; every process of
// the sandbox must be gone shortly after.
func TestHostSIGKILLLeavesNothing(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	ws, err := os.MkdirTemp("", "isolate-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	helper := execHelper(t, ws, "")
	members := func() []int {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == helper.nsLink {
				p, _ := strconv.Atoi(e.Name())
				pids = append(pids, p)
			}
		}
		return pids
	}
	if n := len(members()); n < 4 {
		t.Fatalf("expected init, sh and two sleeps in the sandbox, found %d", n)
	}
	helper.cmd.Process.Signal(syscall.SIGKILL)
	helper.cmd.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for len(members()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := members(); len(left) > 0 {
		t.Errorf("processes of the sandbox (init %d) survived the host's SIGKILL: %v", helper.initPid, left)
		for _, p := range left {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}
