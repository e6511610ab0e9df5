package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// apiError turns an error from the API server into a *driver.Error whose
// message says what was being done and what the user can do about it.
func (d *Driver) apiError(what string, err error) error {
	var de *driver.Error
	if errors.As(err, &de) {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Errorf(driver.CodeTimeout, err, what+": the cluster did not answer in time; check `kubectl get pods` and retry with a longer deadline")
	case errors.Is(err, context.Canceled):
		return driver.Errorf(driver.CodeTimeout, err, what+": canceled")
	case apierrors.IsForbidden(err):
		return driver.Errorf(driver.CodeBackend, err, fmt.Sprintf(
			"%s: the cluster's RBAC forbids it; grant the identity in your kubeconfig the role in docs/kubernetes.md (pods, pods/attach, networkpolicies in namespace %s)",
			what, d.s.namespace))
	case apierrors.IsUnauthorized(err):
		return driver.Errorf(driver.CodeBackend, err, what+": the cluster rejected the credentials; refresh your kubeconfig")
	case apierrors.IsNotFound(err):
		return driver.Errorf(driver.CodeNotFound, err, what+": not found on the cluster (does namespace "+d.s.namespace+" exist?)")
	case apierrors.IsAlreadyExists(err):
		return driver.Errorf(driver.CodeExists, err, what+": already exists on the cluster")
	case isDialError(err):
		return driver.Errorf(driver.CodeBackend, err, what+": cannot reach the Kubernetes API server at "+d.host()+"; start the cluster or point KUBECONFIG at a running one")
	}
	return driver.Errorf(driver.CodeBackend, err, what+": the Kubernetes API server failed")
}

// isDialError recognises an API server that does not answer at all.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || strings.Contains(err.Error(), "connection refused") ||
		strings.Contains(err.Error(), "no such host")
}

// IsUnreachable reports whether err says the cluster could not be reached
// or configured at all (no kubeconfig, API server down), as opposed to a
// cluster that answered with a failure. `sandboxkit gc` uses it to tell
// "nothing to do here" from a real error.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var de *driver.Error
	if errors.As(err, &de) && de.Err != nil {
		err = de.Err
	}
	return errors.Is(err, errNoConfig) || isDialError(err)
}

func (d *Driver) host() string {
	if d.rest != nil {
		return d.rest.Host
	}
	return "(no configuration)"
}

func parseURL(s string) (*url.URL, error) { return url.Parse(s) }
