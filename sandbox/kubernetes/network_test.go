package kubernetes_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/kubernetes"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestNetworkIsMeasuredClosed: every sandbox's creation measured the pod
// network closed (the CI cluster's firewall, standing in for a network
// plugin that enforces the deny-all NetworkPolicy), and a command inside
// cannot reach the node either.
func TestNetworkIsMeasuredClosed(t *testing.T) {
	sb := newSandbox(t)
	info := sb.Info()
	c, _ := control(info, "network")
	if !c.Enforced || !strings.HasPrefix(info.Extra["network_probe"], "blocked") {
		t.Fatalf("network control %+v, probe %q; want enforced and measured blocked", c, info.Extra["network_probe"])
	}
	res, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"python3", "-c", `
import socket
gw = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        import struct; gw = socket.inet_ntoa(struct.pack("<L", int(f[2], 16)))
for port in (10250, 6443, 22, 80):
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((gw, port)); print("ESCAPED", port)
    except ConnectionRefusedError:
        print("REACHED", port)
    except OSError as e:
        print("blocked", port, e.errno)
`}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, "ESCAPED") || strings.Contains(res.Stdout, "REACHED") || !strings.Contains(res.Stdout, "blocked 80") {
		t.Fatalf("connections from the pod to its node: %s%s", res.Stdout, res.Stderr)
	}
}

// TestOpenNetworkIsRefusedUnlessAccepted opens the CI cluster's firewall
// for the node's kubelet port for a moment: the pod's packets then reach
// the node, as on a cluster whose network plugin ignores NetworkPolicy. A
// sandbox must then be refused with ISOLATION_UNAVAILABLE, or, accepted by
// name, be created with its network control reported not enforced.
func TestOpenNetworkIsRefusedUnlessAccepted(t *testing.T) {
	d := testDriver(t)
	chain := os.Getenv("SANDBOXKIT_K8S_FIREWALL_CHAIN")
	if chain == "" || os.Geteuid() != 0 {
		sandboxtest.Unavailable(t, "kubernetes", "SANDBOXKIT_K8S_FIREWALL_CHAIN unset or not root: cannot open the CI cluster's firewall to test the refusal")
	}
	match := []string{"-p", "tcp", "--dport", "10250", "-j", "ACCEPT"}
	if out, err := exec.Command("iptables", append([]string{"-I", chain, "1"}, match...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("iptables", append([]string{"-D", chain}, match...)...).CombinedOutput(); err != nil {
			t.Errorf("removing the firewall opening: %v: %s", err, out)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner(owner))
	if !errors.Is(err, sandbox.ErrIsolationUnavailable) {
		t.Fatalf("New on an open network = %v, want %s", err, sandbox.CodeIsolationUnavailable)
	}
	for _, want := range []string{"does not enforce", kubernetes.OptAcceptNetwork + "=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	assertNoLeftovers(t, d)

	// Accepted by name, the backend starts the pod and reports the
	// control as not enforced, with the gap. (sandbox.New still refuses
	// it: the rich layer accepts an unenforced no-network only for tiers
	// chosen with AllowWeaker, so this is the driver's own API.)
	inst, err := d.Start(ctx, driver.Config{Owner: owner, Options: map[string]string{kubernetes.OptAcceptNetwork: "true"}})
	if err != nil {
		t.Fatalf("Start with %s=true: %v", kubernetes.OptAcceptNetwork, err)
	}
	defer inst.Close(context.Background())
	iso := inst.Isolation()
	for _, c := range iso.Controls {
		if c.Name == "network" && (c.Enforced || !strings.Contains(c.Mechanism, "NOT enforced")) {
			t.Fatalf("accepted open network reported as %+v", c)
		}
	}
	found := false
	for _, g := range iso.Gaps {
		found = found || strings.Contains(g, "does not enforce NetworkPolicy")
	}
	if !found {
		t.Errorf("gaps %q do not admit the open network", iso.Gaps)
	}
}
