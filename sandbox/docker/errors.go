package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// engineError turns an error from the engine API into a *driver.Error whose
// message says what was being done and what the user can do about it.
func (d *Driver) engineError(what string, err error) error {
	var de *driver.Error
	if errors.As(err, &de) {
		return err
	}
	switch {
	case client.IsErrConnectionFailed(err) || isDialError(err):
		return driver.Errorf(driver.CodeBackend, err, fmt.Sprintf(
			"%s: cannot reach the Docker engine at %s; start it (dockerd, or the Docker service) or point DOCKER_HOST at a running engine",
			what, d.hostForMessages()))
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Errorf(driver.CodeTimeout, err, what+": the Docker engine did not answer in time; check `docker info` and retry with a longer deadline")
	case errors.Is(err, context.Canceled):
		return driver.Errorf(driver.CodeTimeout, err, what+": canceled")
	case cerrdefs.IsNotFound(err):
		return driver.Errorf(driver.CodeNotFound, err, what+": not found on the Docker engine")
	case cerrdefs.IsConflict(err):
		return driver.Errorf(driver.CodeExists, err, what+": conflicts with an existing object on the Docker engine")
	case cerrdefs.IsPermissionDenied(err) || strings.Contains(err.Error(), "permission denied while trying to connect"):
		return driver.Errorf(driver.CodeBackend, err, what+": permission denied by the Docker engine; run as a user in the docker group or point DOCKER_HOST at an engine you may use")
	}
	return driver.Errorf(driver.CodeBackend, err, what+": the Docker engine failed")
}

// isDialError recognises a dead unix socket or TCP port that the client
// library reports as a plain dial error rather than errConnectionFailed.
// Only client-side network errors count: the engine's own error strings
// (e.g. a failed pull from an unreachable registry) are not *net.OpError.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || strings.Contains(err.Error(), "Cannot connect to the Docker daemon")
}

func (d *Driver) hostForMessages() string {
	if d.cli != nil {
		return d.cli.DaemonHost()
	}
	if d.s.host != "" {
		return d.s.host
	}
	return "the default socket"
}

// IsUnreachable reports whether err says the Docker engine could not be
// reached at all (no daemon, wrong DOCKER_HOST), as opposed to an engine
// that answered with a failure. Callers with optional Docker work (such as
// garbage collection on a machine that only uses the local backend) use it
// to tell "nothing to do here" from a real error.
func IsUnreachable(err error) bool {
	return err != nil && (client.IsErrConnectionFailed(err) || isDialError(err))
}
