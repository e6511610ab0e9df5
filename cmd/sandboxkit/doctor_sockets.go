package main

import (
	"fmt"
	"io"

	"github.com/sandboxkit/sandboxkit/sandbox/local/isolate"
)

// doctorSockets reports the host's powerful unix sockets (container
// engines, D-Bus, ssh-agent) that a sandbox sharing the host's filesystem
// would reach first, whether this user can reach each, and how the local
// backend's tiers keep them out (issue 25: the landlock tier once handed
// the Docker socket to sandboxed code).
func doctorSockets(w io.Writer, caps isolate.Capabilities) {
	socks := isolate.HostSockets()
	wall := isolate.HostSocketWall(caps.LandlockABI)
	if len(socks) == 0 {
		fmt.Fprintf(w, "%-16s none of the known ones (docker, containerd, podman, D-Bus, ssh-agent, ...) on this machine\n", "host sockets")
		return
	}
	fmt.Fprintf(w, "%-16s %d found; the namespace and landlock tiers keep them out (the process tier does not):\n", "host sockets", len(socks))
	fmt.Fprintf(w, "%-16s   namespace tier: %s\n", "", wall["namespace"])
	fmt.Fprintf(w, "%-16s   landlock tier:  %s\n", "", wall["landlock"])
	for _, s := range socks {
		who := "not reachable by you"
		if s.Reachable {
			who = "REACHABLE by you (gives " + s.Grant + ")"
		}
		fmt.Fprintf(w, "%-16s   %-15s %s  %s\n", "", s.Name, s.Path, who)
	}
}
