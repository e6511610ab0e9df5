package toolkit

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// The model must never be told the network is off by a tier that shares the
// host's network (the process tier reports the control as not enforced).
func TestNetworkStateFollowsTheEnforcedControl(t *testing.T) {
	cases := []struct {
		name string
		info sandbox.Info
		want string
	}{
		{"namespace", sandbox.Info{Controls: []sandbox.Control{{Name: "network", Enforced: true, Mechanism: "net namespace (only lo)"}}}, "off"},
		{"process tier", sandbox.Info{Controls: []sandbox.Control{{Name: "network", Enforced: false, Mechanism: "not enforced: the process tier shares the host's network"}}},
			"NOT blocked (not enforced: the process tier shares the host's network)"},
		{"allowed", sandbox.Info{Network: true}, "on (allowed by the host program)"},
		{"no report", sandbox.Info{}, "NOT blocked (no control reported)"},
	}
	for _, c := range cases {
		if got := networkState(c.info); got != c.want {
			t.Errorf("%s: networkState = %q, want %q", c.name, got, c.want)
		}
	}
}
