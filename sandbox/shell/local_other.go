//go:build !unix

package shell

import (
	"context"
	"errors"
	"runtime"
)

// LocalStarter starts bash on this machine on a pseudo-terminal in a
// session of its own. Both are Unix facilities, so on this platform it
// refuses: start the shell inside a sandbox (the Docker backend) instead.
func LocalStarter(ctx context.Context, argv []string, env []string, dir string) (PTY, error) {
	return nil, errors.New("shell: LocalStarter needs a Unix pseudo-terminal and sessions, which " + runtime.GOOS +
		" does not have; run the shell in a sandbox (the Docker backend) instead")
}
