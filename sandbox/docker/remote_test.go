package docker

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// tcpEndpoint returns a second endpoint of this machine's engine: a TCP
// listener on loopback that carries each connection to the engine's unix
// socket, as a remote DOCKER_HOST is reached — over TCP, with no shared
// file system assumed.
func tcpEndpoint(t *testing.T) string {
	t.Helper()
	needEngine(t)
	local := New()
	sock := strings.TrimPrefix(local.cli.DaemonHost(), "unix://")
	local.Close()
	if !strings.HasPrefix(sock, "/") {
		skipOrFail(t, "the engine is not on a local unix socket")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	// At the end the engine's side may still be busy with a connection
	// the test's client has closed (an attach whose stdin the engine
	// stopped reading when a stopped agent filled it: the forwarder then
	// waits in its write to the engine for minutes), so the forwarder
	// drops what is left instead of waiting for it.
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				var u net.Conn
				proxy(c, sock, func(e net.Conn) {
					mu.Lock()
					conns[e], u = true, e
					mu.Unlock()
				})
				mu.Lock()
				delete(conns, c)
				delete(conns, u)
				mu.Unlock()
			}()
		}
	}()
	return "tcp://" + ln.Addr().String()
}

// remoteSmoke runs a command in a sandbox of d through the copied-in agent
// and checks that Info names where the engine is.
func remoteSmoke(t *testing.T, d *Driver, wantHost string) {
	t.Helper()
	s := start(t, d, driver.Config{ID: "remote-" + randID()})
	out, code := s.run(t, "sh", "-c", "echo remote; cat /proc/1/cmdline | tr '\\0' ' '")
	if code != 0 || !strings.Contains(out, "remote") || !strings.Contains(out, agentPath) {
		t.Fatalf("exit %d %q, want output from the copied-in agent", code, out)
	}
	if got := s.c.Isolation().Extra["engine_host"]; !strings.Contains(got, wantHost) {
		t.Errorf("Info's engine_host %q does not name %s", got, wantHost)
	}
	// The agent client counts on the stream's write deadline where it
	// says it has one: an ssh connection helper takes deadlines and does
	// nothing, so its stream must say it has none (review R4, session 8).
	wantDeadlines := !strings.HasPrefix(wantHost, "ssh://")
	if err := s.c.conn.SetWriteDeadline(time.Time{}); (err == nil) != wantDeadlines {
		t.Errorf("the attach stream over %s: SetWriteDeadline = %v, want deadlines %v", wantHost, err, wantDeadlines)
	}
}

// TestRemoteEngineOverTCP reaches the engine through $DOCKER_HOST=tcp://.
// Nothing of the host may be needed inside: the agent arrives by
// CopyToContainer and the stream by the hijacked attach connection.
func TestRemoteEngineOverTCP(t *testing.T) {
	host := tcpEndpoint(t)
	t.Setenv("DOCKER_HOST", host)
	d := newTestDriver(t)
	if d.cli.DaemonHost() != host {
		t.Fatalf("driver uses %s, want %s", d.cli.DaemonHost(), host)
	}
	remoteSmoke(t, d, host)
}

// A host workspace means the engine's directory of that name: with an
// engine that may be elsewhere, the backend refuses it unless the user
// says the path exists there, and then Info does not claim it is on this
// machine. (This engine is on this machine, so the directory is shared and
// the test can see both sides.)
func TestHostWorkspaceWithARemoteEngine(t *testing.T) {
	host := tcpEndpoint(t)
	dir, err := os.MkdirTemp("", "sandboxkit-remote-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	d := newTestDriver(t, WithHost(host))
	_, err = d.Start(testCtx(t), driver.Config{ID: "rws-" + randID(), Workspace: dir})
	if codeOf(err) != driver.CodeInvalidArgument || !strings.Contains(err.Error(), "WithWorkspaceOnEngine") || !strings.Contains(err.Error(), host) {
		t.Fatalf("Start with a host workspace on %s = %v; want %s naming the engine and docker.WithWorkspaceOnEngine", host, err, driver.CodeInvalidArgument)
	}

	d = newTestDriver(t, WithHost(host), WithWorkspaceOnEngine())
	s := start(t, d, driver.Config{ID: "rws-" + randID(), Workspace: dir})
	if _, code := s.run(t, "sh", "-c", "echo from-the-engine > /workspace/f"); code != 0 {
		t.Fatal("writing into the engine's workspace failed")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "from-the-engine\n" {
		t.Errorf("the engine's directory holds %q (%v)", b, err)
	}
	iso := s.c.Isolation()
	if iso.HostWorkspace != "" || iso.Extra["engine_workspace"] != dir || !strings.Contains(iso.Extra["engine_host"], host) {
		t.Errorf("Info: HostWorkspace %q, engine_workspace %q, engine_host %q; want no host path, %s on the engine at %s",
			iso.HostWorkspace, iso.Extra["engine_workspace"], iso.Extra["engine_host"], dir, host)
	}
}

// A docker context made and chosen with the docker CLI, as users do, is
// the engine the backend uses; $DOCKER_CONTEXT picks one too.
func TestDockerContextChoosesTheEngine(t *testing.T) {
	host := tcpEndpoint(t)
	cli, err := exec.LookPath("docker")
	if err != nil {
		skipOrFail(t, "no docker CLI to make a context with")
	}
	cfg := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfg)
	t.Setenv("DOCKER_HOST", "")
	t.Setenv("DOCKER_CONTEXT", "")
	for _, args := range [][]string{
		{"context", "create", "sbx-remote", "--docker", "host=" + host},
		{"context", "use", "sbx-remote"},
	} {
		if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	d := newTestDriver(t)
	if d.cli.DaemonHost() != host {
		t.Fatalf("with `docker context use sbx-remote` the driver uses %s, want %s", d.cli.DaemonHost(), host)
	}
	remoteSmoke(t, d, "docker context sbx-remote")

	// $DOCKER_CONTEXT wins over the current context; a missing one is an
	// error that says where contexts are, not a silent fallback.
	t.Setenv("DOCKER_CONTEXT", "no-such-context")
	d = newTestDriver(t)
	_, err = d.Start(testCtx(t), driver.Config{ID: "ctx-" + randID()})
	if codeOf(err) != driver.CodeBackend || !strings.Contains(err.Error(), "no-such-context") || !strings.Contains(err.Error(), "docker context ls") {
		t.Fatalf("Start with DOCKER_CONTEXT=no-such-context = %v; want %s naming it", err, driver.CodeBackend)
	}
}

// sshEndpoint starts an ssh server on a loopback port (key login for root
// only, keys made for the test) and returns an ssh:// host for the engine
// of this machine, with an ssh on PATH that trusts that server and uses
// the test's key — what a user's ~/.ssh/config would say.
func sshEndpoint(t *testing.T) string {
	t.Helper()
	needEngine(t)
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if sshd, err = exec.LookPath("/usr/sbin/sshd"); err != nil {
			skipOrFail(t, "no sshd (Debian: openssh-server) for an ssh:// engine endpoint")
		}
	}
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		skipOrFail(t, "no ssh client (Debian: openssh-client)")
	}
	if os.Getuid() != 0 {
		skipOrFail(t, "the ssh endpoint logs in as root, the engine's user here; needs root to run sshd")
	}
	dir := t.TempDir()
	for _, key := range []string{"host_key", "client_key"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, key)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("authorized_keys", read("client_key.pub")+"\n")
	cfg := write("sshd_config", fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host_key
PidFile %[2]s/sshd.pid
AuthorizedKeysFile %[2]s/authorized_keys
AllowUsers root
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
`, port, dir))
	write("known_hosts", fmt.Sprintf("[127.0.0.1]:%d %s\n", port, read("host_key.pub")))
	clientCfg := write("ssh_config", fmt.Sprintf(`Host *
  IdentityFile %s/client_key
  IdentitiesOnly yes
  UserKnownHostsFile %[1]s/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
`, dir))
	// sshd wants its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	srv := exec.Command(sshd, "-D", "-e", "-f", cfg)
	srv.Stderr = &syncWriter{w: &log}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd did not listen on port %d: %s", port, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte("#!/bin/sh\nexec "+ssh+" -F "+clientCfg+` "$@"`+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return fmt.Sprintf("ssh://root@127.0.0.1:%d", port)
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestRemoteEngineOverSSH reaches the engine as `DOCKER_HOST=ssh://…`
// users do: the backend runs `ssh HOST docker system dial-stdio` (the
// docker CLI's connection helper) and speaks the API, and the agent's
// attach stream, over it.
func TestRemoteEngineOverSSH(t *testing.T) {
	host := sshEndpoint(t)
	t.Setenv("DOCKER_HOST", host)
	d := newTestDriver(t)
	remoteSmoke(t, d, host)
}

// proxy carries c to the engine's unix socket sock both ways; dialled
// learns of the connection to the engine (the forwarder drops both at the
// end).
func proxy(c net.Conn, sock string, dialled func(net.Conn)) {
	defer c.Close()
	u, err := net.Dial("unix", sock)
	if err != nil {
		return
	}
	dialled(u)
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); u.(*net.UnixConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

func TestRuntimeChoosesTheTier(t *testing.T) {
	tests := []struct {
		name    string
		runtime string
		want    driver.Tier
	}{
		{"the default runtime is the container tier", "", driver.TierContainer},
		{"runc is the container tier", "runc", driver.TierContainer},
		{"runsc is the gvisor tier", "runsc", driver.TierGVisor},
		{"a runsc variant is the gvisor tier", "runsc-debug", driver.TierGVisor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New(WithRuntime(tt.runtime))
			defer d.Close()
			p, err := d.resolve(driver.Config{MinTier: driver.TierContainer})
			if err != nil {
				t.Fatal(err)
			}
			if p.tier != tt.want {
				t.Errorf("tier %s, want %s", p.tier, tt.want)
			}
		})
	}
}

// TestStaticProgramServesAsItsOwnAgent builds a user's program static and
// runs it: with no agent binary named, the backend copies the program
// itself into the container, where this package's init hook serves.
func TestStaticProgramServesAsItsOwnAgent(t *testing.T) {
	needEngine(t)
	bin := filepath.Join(t.TempDir(), "selfagent")
	build := exec.Command("go", "build", "-o", bin, "./testdata/selfagent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the program: %v\n%s", err, out)
	}
	dropAgentVolume(t, newTestDriver(t), bin)
	run := exec.Command(bin, testImage())
	run.Env = append(os.Environ(), agentEnv+"=") // no override: the program must use itself
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("program failed: %v\n%s", err, out)
	}
	for _, want := range []string{"source=running program", "pid1=" + agentPath + " " + hookArg, "exit=0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}
