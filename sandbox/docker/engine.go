package docker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/cli/cli/connhelper"
	dockercontext "github.com/docker/cli/cli/context/docker"
	"github.com/docker/cli/cli/context/store"
	"github.com/docker/docker/client"
)

// The engine is found the way the docker CLI finds it, so that a user's
// setup works unchanged: an explicit host (WithHost) or context
// (WithContext); else $DOCKER_HOST; else $DOCKER_CONTEXT; else the current
// context of the CLI's configuration ($DOCKER_CONFIG or ~/.docker,
// `docker context use`); else the default socket. Two pieces of the docker
// CLI do what the engine's client library does not: the connection helper
// (an ssh:// host runs `ssh HOST docker system dial-stdio` and speaks
// HTTP over its stdio) and the context store (contexts' endpoints and TLS
// material). Both are used as they are, from github.com/docker/cli at the
// release of the engine client this module uses.

// engineTarget is how the driver reaches its engine.
type engineTarget struct {
	opts []client.Opt
	// where names the engine for messages and Info: the host, and the
	// context it came from.
	where string
	// local says the engine is reached through a socket on this machine
	// (unix://, npipe://), so a host path names the same directory for it.
	// Every other way (tcp://, ssh://, a context) may lead to another
	// machine, loopback included (a tunnel): a host workspace then needs
	// the user's word that the path exists on the engine's machine.
	local bool
	// deadlines says the engine's connections honour deadlines (unix://,
	// tcp://, npipe://): an ssh:// host's connection helper takes them and
	// does nothing (docker/cli's commandConn), and a client the caller
	// made may dial anything. The attach stream reports which
	// (stream.SetWriteDeadline), so that the agent client does not count
	// on a deadline that never fires (review R4 of session 8).
	deadlines bool
}

// honoursDeadlines reports whether connections to host (an engine URL
// dialled directly, not through a helper) honour deadlines.
func honoursDeadlines(host string) bool {
	for _, scheme := range []string{"unix://", "tcp://", "npipe://"} {
		if strings.HasPrefix(host, scheme) {
			return true
		}
	}
	return false
}

// resolveEngine picks the engine for settings s.
func resolveEngine(s settings) (engineTarget, error) {
	switch {
	case s.host != "":
		return hostTarget(s.host, "docker.WithHost")
	case s.context != "":
		return contextTarget(s.context, "docker.WithContext")
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		// The docker CLI lets $DOCKER_HOST win over $DOCKER_CONTEXT.
		return hostTarget(h, "$DOCKER_HOST")
	}
	if name := os.Getenv("DOCKER_CONTEXT"); name != "" {
		return contextTarget(name, "$DOCKER_CONTEXT")
	}
	if name, err := currentContext(); err != nil {
		return engineTarget{}, err
	} else if name != "" {
		return contextTarget(name, "the docker CLI's current context ("+filepath.Join(configDir(), "config.json")+")")
	}
	return hostTarget("", "")
}

// hostTarget reaches the engine at host ("" for the default socket), with
// the TLS settings of the environment ($DOCKER_TLS_VERIFY,
// $DOCKER_CERT_PATH) as the docker CLI applies them to a host.
func hostTarget(host, from string) (engineTarget, error) {
	opts := []client.Opt{client.FromEnv}
	where := host
	if host != "" {
		helper, err := connhelper.GetConnectionHelper(host)
		if err != nil {
			return engineTarget{}, fmt.Errorf("%s %q: %w", from, host, err)
		}
		if helper != nil {
			opts = append(opts, helperOpts(helper)...)
		} else {
			opts = append(opts, client.WithHost(host))
		}
	} else {
		where = client.DefaultDockerHost
		if h := os.Getenv("DOCKER_HOST"); h != "" {
			where = h
		}
	}
	opts = append(opts, client.WithAPIVersionNegotiation())
	return engineTarget{opts: opts, where: where, local: isSocket(where), deadlines: honoursDeadlines(where)}, nil
}

// helperOpts carries the client's HTTP over a connection helper's stream
// (the ssh command), as the docker CLI does.
func helperOpts(h *connhelper.ConnectionHelper) []client.Opt {
	return []client.Opt{
		client.WithHost(h.Host),
		client.WithDialContext(h.Dialer),
	}
}

// contextTarget reaches the engine of the docker context name, read from
// the CLI's context store with its TLS material.
func contextTarget(name, from string) (engineTarget, error) {
	if name == "default" {
		// The CLI's default context is the environment's host.
		return hostTarget(os.Getenv("DOCKER_HOST"), "$DOCKER_HOST")
	}
	dir := filepath.Join(configDir(), "contexts")
	s := store.New(dir, store.NewConfig(
		func() any { return &map[string]any{} },
		store.EndpointTypeGetter(dockercontext.DockerEndpoint, func() any { return &dockercontext.EndpointMeta{} }),
	))
	meta, err := s.GetMetadata(name)
	if err != nil {
		return engineTarget{}, fmt.Errorf("docker context %q (from %s) cannot be read from %s: %w; list contexts with `docker context ls`", name, from, dir, err)
	}
	ep, err := dockercontext.EndpointFromContext(meta)
	if err != nil {
		return engineTarget{}, fmt.Errorf("docker context %q: %w", name, err)
	}
	withTLS, err := dockercontext.WithTLSData(s, name, ep)
	if err != nil {
		return engineTarget{}, fmt.Errorf("docker context %q: reading its TLS material: %w", name, err)
	}
	opts, err := withTLS.ClientOpts()
	if err != nil {
		return engineTarget{}, fmt.Errorf("docker context %q: %w", name, err)
	}
	return engineTarget{opts: opts, where: fmt.Sprintf("%s (docker context %s)", ep.Host, name), local: isSocket(ep.Host), deadlines: honoursDeadlines(ep.Host)}, nil
}

// configDir is the docker CLI's configuration directory.
func configDir() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".docker"
	}
	return filepath.Join(home, ".docker")
}

// currentContext reads the context `docker context use` chose, "" when
// there is none (or it is "default").
func currentContext() (string, error) {
	path := filepath.Join(configDir(), "config.json")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the docker CLI's configuration: %w", err)
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("the docker CLI's configuration %s is not valid JSON: %w", path, err)
	}
	if cfg.CurrentContext == "default" {
		return "", nil
	}
	return cfg.CurrentContext, nil
}

func isSocket(host string) bool {
	proto, _, _ := strings.Cut(host, "://")
	return proto == "unix" || proto == "npipe"
}
