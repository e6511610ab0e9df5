package docker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

func TestCommandsRunThroughTheResidentAgent(t *testing.T) {
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "smoke-" + randID()})
	out, code := s.run(t, "sh", "-c", "echo hello; echo oops >&2; exit 3")
	if code != 3 || !strings.Contains(out, "hello") || !strings.Contains(out, "oops") {
		t.Fatalf("got code %d output %q, want 3 with hello and oops", code, out)
	}
	if h := s.cl.Hello(); !h.PID1 || h.UID != 65534 {
		t.Errorf("agent hello = %+v, want PID 1 and uid 65534", h)
	}
	out, _ = s.run(t, "python3", "-c", "import numpy, pandas, matplotlib; print(numpy.arange(4).sum())")
	if strings.TrimSpace(out) != "6" {
		t.Errorf("python with numpy printed %q, want 6", out)
	}
}

// TestIsolationFacts proves each default control from inside the
// container, the way hostile code would probe it.
func TestIsolationFacts(t *testing.T) {
	d := newTestDriver(t)
	// A listener on the host's loopback: a sandbox sharing the host's
	// network stack would reach it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	s := start(t, d, driver.Config{ID: "facts-" + randID()})

	tests := []struct {
		name     string
		script   string
		wantCode int
		want     string // substring of the output
	}{
		{"only the loopback interface exists", "ls /sys/class/net", 0, "lo"},
		{"no other interface exists", "ls /sys/class/net | grep -vx lo | wc -l", 0, "0"},
		{"the host's loopback listener is unreachable", fmt.Sprintf(
			`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), timeout=2)"`, port), 1, "Connection refused"},
		{"no effective capabilities", "grep CapEff /proc/self/status", 0, "0000000000000000"},
		{"no bounding capabilities", "grep CapBnd /proc/self/status", 0, "0000000000000000"},
		{"no-new-privileges is set", "grep NoNewPrivs /proc/self/status", 0, "1"},
		{"seccomp filters syscalls", "grep -E '^Seccomp:' /proc/self/status", 0, "2"},
		{"runs as an unprivileged user", "id -u; id -g", 0, "65534\n65534"},
		{"the root file system is read-only", "touch /etc/probe 2>&1; touch /usr/probe 2>&1; touch /probe 2>&1", 1, "Read-only file system"},
		{"the workspace is writable", "echo x > /workspace/probe && cat /workspace/probe && pwd", 0, "x\n/workspace"},
		{"/tmp is writable", "echo y > /tmp/probe && cat /tmp/probe", 0, "y"},
		{"the agent binary cannot be replaced", "cp /bin/true /.sandboxkit/agent 2>/dev/null || rm -f /.sandboxkit/agent 2>/dev/null || echo refused", 0, "refused"},
		{"remounting the root read-write fails", `python3 -c "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); libc.mount(b'', b'/', b'', 32, None); print(os.strerror(ctypes.get_errno()))"`, 0, "Operation not permitted"},
		{"only the sandbox's processes are visible", "ls /proc | grep -c '^[0-9]'", 0, ""},
		{"the agent is PID 1", "cat /proc/1/cmdline | tr '\\0' ' '", 0, agentPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := s.run(t, "sh", "-c", tt.script)
			if code != tt.wantCode || !strings.Contains(out, tt.want) {
				t.Fatalf("%s: exit %d, output %q; want exit %d containing %q", tt.script, code, out, tt.wantCode, tt.want)
			}
		})
	}
	out, _ := s.run(t, "sh", "-c", "ls /proc | grep -c '^[0-9]'")
	if n := strings.TrimSpace(out); len(n) > 1 {
		t.Errorf("%s processes visible, want only the agent and the probe", n)
	}
}

func TestLimitsAreEnforcedByTheKernel(t *testing.T) {
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "limits-" + randID(), Limits: driver.Limits{
		MemoryBytes: 128 << 20, Pids: 32, DiskBytes: 8 << 20, TmpBytes: 4 << 20,
	}})
	tests := []struct {
		name     string
		script   string
		wantCode int
		want     string
	}{
		{"writing past the workspace quota fails", "dd if=/dev/zero of=/workspace/big bs=1M count=16 2>&1", 1, "No space left on device"},
		{"writing past the /tmp size fails", "dd if=/dev/zero of=/tmp/big bs=1M count=8 2>&1", 1, "No space left on device"},
		{"allocating past the memory limit kills the allocator", `python3 -c "b = bytearray(512 << 20); print(len(b))"`, 137, "Killed"},
		{"a fork bomb stops at the pids limit", "sh -c 'for i in $(seq 64); do sleep 30 & done' 2>&1; pkill -x sleep; echo cleaned", 0, "Cannot fork"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := s.run(t, "sh", "-c", tt.script)
			if code != tt.wantCode || !strings.Contains(out, tt.want) {
				t.Fatalf("%s: exit %d, output %q; want exit %d containing %q", tt.script, code, out, tt.wantCode, tt.want)
			}
		})
	}
	// The sandbox stays usable after the OOM kill of a child.
	if out, code := s.run(t, "echo", "alive"); code != 0 || strings.TrimSpace(out) != "alive" {
		t.Fatalf("after the limits: exit %d %q, want a working sandbox", code, out)
	}
	deadline := time.Now().Add(3 * time.Second)
	for !s.c.OOMKilled() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !s.c.OOMKilled() {
		t.Error("OOMKilled() = false after a child was OOM-killed")
	}
}

func TestIsolationReport(t *testing.T) {
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "report-" + randID(), Limits: driver.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUSeconds: 10}})
	iso := s.c.Isolation()
	if iso.Tier != driver.TierContainer {
		t.Errorf("tier %s, want container", iso.Tier)
	}
	if iso.WorkspacePath != "/workspace" || iso.HostWorkspace != "" {
		t.Errorf("workspace %q host %q, want /workspace and none", iso.WorkspacePath, iso.HostWorkspace)
	}
	if iso.Extra["container_id"] != s.c.ID() || iso.Extra["image"] != testImage() {
		t.Errorf("extra %v lacks container id %s or image %s", iso.Extra, s.c.ID(), testImage())
	}
	got := map[string]bool{}
	for _, c := range iso.Controls {
		got[c.Name] = c.Enforced
	}
	for _, name := range []string{"network", "filesystem", "privileges", "syscalls", "memory", "pids", "cpu", "disk"} {
		if !got[name] {
			t.Errorf("control %s not reported as enforced: %+v", name, iso.Controls)
		}
	}
	ins, err := d.cli.ContainerInspect(context.Background(), s.c.ID())
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{LabelSandboxkit: "1", LabelID: iso.Extra["container_name"][len("sandboxkit-"):], LabelOwner: "sandboxkit-docker-test"} {
		if ins.Config.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, ins.Config.Labels[k], want)
		}
	}
	if !ins.HostConfig.AutoRemove {
		t.Error("container is not auto-removed")
	}
}
