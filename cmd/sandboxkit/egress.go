package main

import (
	"flag"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// domainsFlag is --allow-domain: repeatable, one egress rule each.
type domainsFlag []sandbox.EgressRule

func (d *domainsFlag) String() string {
	var s []string
	for _, r := range *d {
		s = append(s, r.String())
	}
	return strings.Join(s, ",")
}

func (d *domainsFlag) Set(v string) error {
	r, err := sandbox.ParseEgressRule(v)
	if err != nil {
		return err
	}
	*d = append(*d, r)
	return nil
}

const allowDomainUsage = "let sandboxes reach `NAME` over HTTP/HTTPS through a proxy the host runs (repeatable; NAME, *.DOMAIN for its subdomains, NAME:PORT[,PORT]); everything else stays unreachable. Names resolving to private or loopback addresses are refused. Needs the namespace tier or Docker"

// registerEgress adds --allow-domain to fs.
func (f *sandboxFlags) registerEgress(fs *flag.FlagSet) {
	fs.Var(&f.domains, "allow-domain", allowDomainUsage)
}

// egressOptions turns --allow-domain into a sandbox option.
func (f *sandboxFlags) egressOptions() ([]sandbox.Option, error) {
	if len(f.domains) == 0 {
		return nil, nil
	}
	if f.network {
		return nil, usagef("--allow-domain and --allow-network contradict each other: --allow-network opens the whole network, --allow-domain only the names it lists")
	}
	return []sandbox.Option{sandbox.WithEgress(sandbox.EgressPolicy{Allow: f.domains})}, nil
}
