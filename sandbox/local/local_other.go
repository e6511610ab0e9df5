//go:build !linux

package local

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Start fails: the local backend's boundary (namespaces, Landlock,
// seccomp, cgroups) and its agent's process side are Linux's, and without
// them it would run commands unconfined on the host.
func (d *Driver) Start(ctx context.Context, cfg driver.Config) (driver.Instance, error) {
	return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
		"the local backend isolates only on Linux, and this is %s/%s: use the Docker backend, sandbox.WithDriver(docker.New()) (package sandbox/docker; `--backend docker://IMAGE` for the sandboxkit command), which runs the sandbox in a Linux container", runtime.GOOS, runtime.GOARCH))
}

// RunStage returns at once: no sandbox stage runs on this system.
func RunStage() {}

// GC removes nothing: no local sandbox runs on this system.
func GC(olderThan time.Duration) ([]string, error) { return nil, nil }

// GCHost gives back nothing: no local sandbox runs on this system.
func GCHost() ([]string, error) { return nil, nil }
