package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/docker"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/kubernetes"
)

// sandboxFlags are the security settings shared by mcp and run. They are
// fixed when the program starts; nothing a client sends changes them.
type sandboxFlags struct {
	backend     string
	workspace   string
	network     bool
	allowWeaker string
	owner       string
	domains     domainsFlag
}

const sandboxFlagsHelp = `Isolation: by default a sandbox gets the namespace tier or stronger, or is
not created at all. On a machine that cannot provide it (see 'sandboxkit
doctor'), accept a weaker tier by name with --allow-weaker; the tier in
force is always reported (the sandbox_info tool, 'sandboxkit demo').`

func (f *sandboxFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.backend, "backend", "local", "where sandboxes run: `local` (this machine), docker://IMAGE (a container per sandbox) or k8s://NAMESPACE?image=IMAGE (a pod per sandbox on the cluster of $KUBECONFIG; other kubernetes options as query parameters)")
	fs.StringVar(&f.workspace, "workspace", "", "use this existing host `dir` as the workspace (kept afterwards; shared by every sandbox); default: a fresh temporary directory per sandbox, removed when it closes")
	fs.BoolVar(&f.network, "allow-network", false, "give sandboxes network access (shares the host's network); default: no network, enforced by the kernel")
	// Labels the Docker containers (and audit events) of this program's
	// sandboxes, so that `sandboxkit gc --owner` can tell programs apart.
	fs.StringVar(&f.owner, "owner", "sandboxkit-"+strings.TrimPrefix(fs.Name(), "sandboxkit "), "label this program's sandboxes with `name` (Docker containers, audit events), for 'sandboxkit gc --owner'")
	fs.StringVar(&f.allowWeaker, "allow-weaker", "", "comma-separated `tiers` weaker than namespace to accept when nothing better is available: landlock, process")
	f.registerEgress(fs)
}

// options turns the flags into sandbox options. closeBackend releases the
// backend's resources (the Docker client) once no sandbox is created any
// more.
func (f *sandboxFlags) options() (opts []sandbox.Option, closeBackend func(), err error) {
	closeBackend = func() {}
	switch {
	case f.backend == "local":
	case f.backend == "docker" || strings.HasPrefix(f.backend, "docker://"):
		image := strings.TrimPrefix(strings.TrimPrefix(f.backend, "docker"), "://")
		if image == "" {
			image = docker.DefaultImage
		}
		d := docker.New(docker.WithImage(image))
		opts = append(opts, sandbox.WithDriver(d))
		closeBackend = func() { d.Close() }
	case f.backend == "k8s" || strings.HasPrefix(f.backend, "k8s://"):
		d, kopts, err := k8sBackend(f.backend)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, sandbox.WithDriver(d))
		opts = append(opts, kopts...)
	default:
		return nil, nil, usagef("unknown --backend %q: use local, docker://IMAGE (e.g. docker://python:3.12-slim) or k8s://NAMESPACE?image=IMAGE", f.backend)
	}
	if f.workspace != "" {
		abs, err := filepath.Abs(f.workspace)
		if err != nil {
			closeBackend()
			return nil, nil, usagef("--workspace %q: %v", f.workspace, err)
		}
		fi, err := os.Stat(abs)
		if err != nil || !fi.IsDir() {
			closeBackend()
			return nil, nil, usagef("--workspace %q is not an existing directory", f.workspace)
		}
		opts = append(opts, sandbox.WithWorkspace(abs))
	}
	if f.network {
		opts = append(opts, sandbox.WithNetwork())
	}
	if f.owner != "" {
		opts = append(opts, sandbox.WithOwner(f.owner))
	}
	egress, err := f.egressOptions()
	if err != nil {
		closeBackend()
		return nil, nil, err
	}
	opts = append(opts, egress...)
	tiers, err := parseTiers(f.allowWeaker)
	if err != nil {
		closeBackend()
		return nil, nil, err
	}
	if len(tiers) > 0 {
		opts = append(opts, sandbox.AllowWeaker(tiers...))
	}
	return opts, closeBackend, nil
}

// k8sBackend parses --backend k8s://NAMESPACE?image=IMAGE&OPTION=VALUE...
// (namespace and image may be left out: the kubeconfig's namespace and
// kubernetes.DefaultImage). Query parameters other than image are the
// kubernetes backend's options (runtimeClass, nodeSelector, cpu, ...),
// checked when the first sandbox starts.
func k8sBackend(spec string) (*kubernetes.Driver, []sandbox.Option, error) {
	rest := strings.TrimPrefix(strings.TrimPrefix(spec, "k8s"), "://")
	ns, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, nil, usagef("--backend %q: bad query: %v", spec, err)
	}
	var kopts []kubernetes.Option
	if ns != "" {
		kopts = append(kopts, kubernetes.WithNamespace(ns))
	}
	var opts []sandbox.Option
	for k, v := range q {
		if len(v) != 1 {
			return nil, nil, usagef("--backend %q: give %s once", spec, k)
		}
		if k == kubernetes.OptImage {
			kopts = append(kopts, kubernetes.WithImage(v[0]))
			continue
		}
		opts = append(opts, sandbox.WithBackendOption(k, v[0]))
	}
	return kubernetes.New(kopts...), opts, nil
}

// parseTiers parses --allow-weaker. Only tiers weaker than namespace make
// sense there: stronger ones are always accepted.
func parseTiers(list string) ([]sandbox.Tier, error) {
	var out []sandbox.Tier
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		t, ok := driver.ParseTier(name)
		if !ok || t >= sandbox.TierNamespace || t == sandbox.TierNone {
			return nil, usagef("--allow-weaker: %q is not a tier weaker than namespace (use landlock, process, or both: landlock,process)", name)
		}
		out = append(out, t)
	}
	return out, nil
}

// describeIsolation is the one-line summary of a sandbox's isolation used
// by several commands.
func describeIsolation(info sandbox.Info) string {
	s := fmt.Sprintf("backend %s, tier %s", info.Backend, info.Isolation)
	switch {
	case info.Network:
		s += ", network allowed"
	case info.Egress != nil:
		s += ", network only to " + strings.Join(info.Egress.Allow, ", ") + " (egress proxy)"
	case networkEnforced(info):
		s += ", no network"
	default:
		s += ", network NOT isolated (this tier cannot block it)"
	}
	return s
}

// networkEnforced reports whether "no network" is really in force.
func networkEnforced(info sandbox.Info) bool {
	for _, c := range info.Controls {
		if c.Name == "network" {
			return c.Enforced
		}
	}
	return false
}
