//go:build linux

package isolate

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// HostSockets finds the sockets named by the environment (ssh-agent, the
// D-Bus session bus) and the well-known paths (the Docker engine's), says
// which this process can reach, and lists a path only where a socket is.
func TestHostSocketsFindsWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	listen := func(name string) string {
		p := filepath.Join(dir, name)
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return p
	}
	agent := listen("agent.sock")
	bus := listen("bus")
	// A socket file whose server is gone: listed, not reachable.
	dead := filepath.Join(dir, "dead.sock")
	l, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	plain := filepath.Join(dir, "not-a-socket")
	os.WriteFile(plain, nil, 0o600)
	t.Setenv("SSH_AUTH_SOCK", agent)
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+bus+",guid=0123")
	t.Setenv("DOCKER_HOST", "unix://"+dead)
	t.Setenv("XDG_RUNTIME_DIR", plain) // nothing below a file

	got := map[string]HostSocket{}
	for _, s := range HostSockets() {
		got[s.Path] = s
	}
	for path, want := range map[string]HostSocket{
		agent: {Name: "ssh-agent", Reachable: true},
		bus:   {Name: "dbus-session", Reachable: true},
		dead:  {Name: "docker", Reachable: false},
	} {
		s, ok := got[path]
		if !ok {
			t.Errorf("%s (%s) is not listed: %+v", path, want.Name, got)
			continue
		}
		if s.Name != want.Name || s.Reachable != want.Reachable || s.Grant == "" {
			t.Errorf("%s: got %+v, want name %s reachable %v and what it grants", path, s, want.Name, want.Reachable)
		}
	}
	if _, ok := got[plain]; ok {
		t.Errorf("a regular file is listed as a socket")
	}
	// The real engine's socket, where this machine has one.
	if c, err := net.Dial("unix", "/var/run/docker.sock"); err == nil {
		c.Close()
		if s := got["/var/run/docker.sock"]; !s.Reachable || s.Name != "docker" || s.Grant != "host root" {
			t.Errorf("this process reaches /var/run/docker.sock, HostSockets says %+v", s)
		}
	}
}
