//go:build !unix

package pykernel

import (
	"context"
	"errors"
	"runtime"
)

// ExecProc is the Starter that runs the driver on this machine. It needs
// process groups (Signal and Kill must reach every process the code
// started), which this platform does not have, so here it refuses: start
// the kernel inside a sandbox (the Docker backend) instead.
func ExecProc(ctx context.Context, argv []string, env []string, dir string) (Proc, error) {
	return nil, errors.New("pykernel: ExecProc needs Unix process groups, which " + runtime.GOOS +
		" does not have; run the kernel in a sandbox (the Docker backend) instead")
}
