package main

import (
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// domains is --allow-domain: repeatable, one egress rule each. The sandbox
// can then reach those names over HTTP/HTTPS (pip install, git clone,
// documentation) through a proxy the host runs, and nothing else.
type domains []sandbox.EgressRule

func (d *domains) String() string {
	var s []string
	for _, r := range *d {
		s = append(s, r.String())
	}
	return strings.Join(s, ",")
}

func (d *domains) Set(v string) error {
	r, err := sandbox.ParseEgressRule(v)
	if err != nil {
		return err
	}
	*d = append(*d, r)
	return nil
}

// option returns the sandbox option for the listed names (none without).
func (d domains) option() []sandbox.Option {
	if len(d) == 0 {
		return nil
	}
	return []sandbox.Option{sandbox.WithEgress(sandbox.EgressPolicy{Allow: d})}
}
