package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// doctor names the host's powerful unix sockets the local tiers keep out
// (issue 25), here an ssh-agent socket the test serves and, where this
// user can reach it, the Docker engine's.
func TestDoctorNamesHostSockets(t *testing.T) {
	agent := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", agent)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("SSH_AUTH_SOCK", agent)
	r := runBinary(t, "", "doctor")
	var lines []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && (f[0] == "ssh-agent" || f[0] == "docker") {
			lines = append(lines, line)
		}
	}
	out := strings.Join(lines, "\n")
	if !strings.Contains(out, "ssh-agent") || !strings.Contains(out, agent+"  REACHABLE by you (gives your ssh keys)") {
		t.Errorf("doctor does not name the ssh-agent socket %s as reachable:\n%s", agent, r.stdout)
	}
	if !strings.Contains(r.stdout, "landlock tier:") || !strings.Contains(r.stdout, "namespace tier:") {
		t.Errorf("doctor does not say how each tier keeps the sockets out:\n%s", r.stdout)
	}
	if c, err := net.Dial("unix", "/var/run/docker.sock"); err == nil {
		c.Close()
		if !strings.Contains(out, "/var/run/docker.sock  REACHABLE by you (gives host root)") {
			t.Errorf("this user reaches /var/run/docker.sock, doctor does not say so:\n%s", r.stdout)
		}
	}
}
