//go:build linux

// The agent serves only on Linux (hardenProcess refuses elsewhere), so the
// tests that run one are Linux-only.

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// serveStdioEnv makes this test binary an agent serving on its stdio
// (ServeStdio), the way a container runs cmd/sandboxkit-agent.
const serveStdioEnv = "SANDBOXKIT_AGENT_TEST_SERVE_STDIO"

func init() {
	if os.Getenv(serveStdioEnv) == "1" {
		os.Exit(ServeStdio("test agent: "))
	}
}

// pipeConn joins a child's stdout (read) and stdin (write).
type pipeConn struct {
	io.ReadCloser
	w io.WriteCloser
}

func (p pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeConn) Close() error {
	p.w.Close()
	return p.ReadCloser.Close()
}

// The agent's commands run as its uid. The agent as a process of its own
// (ServeStdio, ServeProcess) must be out of their reach all the same: its
// stdout is the stream the host trusts, its environment may hold what the
// launcher or image put there. The Docker backend's self-agent path once
// served without these protections and a command forged protocol frames.
func TestServeStdioKeepsCommandsOutOfTheAgent(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("runs the agent as uid 65534, which needs root (the escape suites cover the unprivileged case)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy the unprivileged uid can execute (go test's build directory
	// is private to root), in a workspace it can write.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "agent.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin)
	cmd.Env = []string{serveStdioEnv + "=1", "SECRET_TOKEN=hunter2"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("the agent did not exit 10s after its stdin closed")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, pipeConn{r, w}, wire.Hello{Workspace: ws, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatalf("handshake: %v (agent stderr: %s)", err, stderr.String())
	}
	defer c.Close()

	// The probe of the escape suite's AgentInternals, plus the agent's
	// environment through a command's own eyes.
	script := `a=$PPID
for f in /proc/$a/fd/*; do echo x 2>/dev/null >"$f" && echo ESCAPED:agent-fd-write; done
head -c1 /proc/$a/environ >/dev/null 2>&1 && echo ESCAPED:agent-environ
head -c1 /proc/$a/mem >/dev/null 2>&1 && echo ESCAPED:agent-mem
env | grep -q SECRET_TOKEN && echo ESCAPED:inherited-secret
echo probe-done`
	var mu sync.Mutex
	var out bytes.Buffer
	call, err := c.Start("exec", wire.ExecRequest{Args: []string{"/bin/sh", "-c", script}, TimeoutMs: 30000}, agent.Handlers{
		OnData: func(_ wire.FrameType, b []byte) { mu.Lock(); out.Write(b); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := call.WaitContext(ctx)
	if err != nil {
		t.Fatalf("exec: %v (agent stderr: %s)", err, stderr.String())
	}
	var rep wire.ExecReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := out.String()
	mu.Unlock()
	if !strings.Contains(got, "probe-done") || strings.Contains(got, "ESCAPED") {
		t.Fatalf("probe (exit %d) printed %q; want probe-done and no ESCAPED", rep.ExitCode, got)
	}
	// Undumpable, the agent's /proc files belong to root although it runs
	// as 65534: that is what keeps its commands out.
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+itoa(cmd.Process.Pid)+"/environ", &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 {
		t.Errorf("the agent's /proc/PID/environ is owned by uid %d, want 0 (an undumpable process)", st.Uid)
	}
	// And the agent keeps working after the probe.
	if err := c.Do(ctx, "ping", struct{}{}, nil); err != nil {
		t.Errorf("the agent failed after the probe: %v", err)
	}
}
