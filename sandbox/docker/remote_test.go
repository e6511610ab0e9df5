package docker

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// TestRemoteEngineOverTCP reaches the engine the way a remote DOCKER_HOST
// does — over TCP, with no shared file system — through a proxy on this
// machine's loopback to the local socket. Nothing of the host may be
// needed inside: the agent arrives by CopyToContainer and the stream by the
// hijacked attach connection.
func TestRemoteEngineOverTCP(t *testing.T) {
	needEngine(t)
	local := New()
	sock := strings.TrimPrefix(local.cli.DaemonHost(), "unix://")
	local.Close()
	if !strings.HasPrefix(sock, "/") {
		t.Skip("the engine is not on a local unix socket")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				proxy(c, sock)
			}()
		}
	}()

	t.Setenv("DOCKER_HOST", "tcp://"+ln.Addr().String())
	d := newTestDriver(t)
	if !strings.HasPrefix(d.cli.DaemonHost(), "tcp://") {
		t.Fatalf("driver uses %s, want the TCP proxy", d.cli.DaemonHost())
	}
	s := start(t, d, driver.Config{ID: "tcp-" + randID()})
	out, code := s.run(t, "sh", "-c", "echo over tcp; cat /proc/1/cmdline | tr '\\0' ' '")
	if code != 0 || !strings.Contains(out, "over tcp") || !strings.Contains(out, agentPath) {
		t.Fatalf("exit %d %q, want output from the copied-in agent", code, out)
	}
	if err := s.c.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s.cl.Close()
	d.Close()
}

func proxy(c net.Conn, sock string) {
	defer c.Close()
	u, err := net.Dial("unix", sock)
	if err != nil {
		return
	}
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
