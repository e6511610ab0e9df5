//go:build linux

package isolate

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// nsInode is the inode of the namespace file at path.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// A root host's sandboxes after the first join a network namespace made
// ahead of time (netns.go), which takes the namespace's creation (0.6–0.8
// ms) off the create. Each sandbox must still get one of its own, with lo
// up, and never the host's or another live sandbox's.
func TestSandboxesNeverShareANetworkNamespace(t *testing.T) {
	requireTier(t, driver.TierNamespace)
	const n = 5
	probe := `readlink /proc/self/ns/net
/usr/bin/python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname(), timeout=2)
print("lo:up")'
sleep 30`
	host := nsInode(t, "/proc/self/ns/net")
	hostUserNS := nsInode(t, "/proc/self/ns/user")
	seen := map[string]bool{}
	joined := 0
	for i := range n {
		b := start(t, nsSpec(t), probe)
		ns := b.line(t)
		if lo := b.line(t); lo != "lo:up" {
			t.Fatalf("sandbox %d: loopback not usable: %q (stderr: %s)", i, lo, b.stderr.String())
		}
		if seen[ns] {
			t.Fatalf("sandbox %d is in the network namespace %s of an earlier sandbox that still runs", i, ns)
		}
		seen[ns] = true
		nsPath := "/proc/" + strconv.Itoa(b.proc.Pid) + "/ns/net"
		if got := nsInode(t, nsPath); got == host {
			t.Fatalf("sandbox %d is in the host's network namespace (%s)", i, ns)
		}
		if !strings.HasPrefix(ns, "net:[") {
			t.Fatalf("sandbox %d: readlink /proc/self/ns/net gave %q", i, ns)
		}
		// Whose user namespace owns it: the host's for a namespace made
		// ahead of time, the sandbox's own for one made by its launch.
		f, err := os.Open(nsPath)
		if err != nil {
			t.Fatal(err)
		}
		owner, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
		f.Close()
		if err != nil {
			t.Fatalf("NS_GET_USERNS: %v", err)
		}
		var st unix.Stat_t
		err = unix.Fstat(owner, &st)
		unix.Close(owner)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ino == hostUserNS {
			joined++
		}
	}
	if os.Geteuid() == 0 && joined < n-1 {
		t.Errorf("%d of %d sandboxes joined a network namespace made ahead of time, want at least %d (all but the first)", joined, n, n-1)
	}
}
