//go:build linux

package local_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// A host program may hold descriptors it inherited without close-on-exec
// (a shell's, a supervisor's, a CI runner's: the machine this was found on
// gave every process a /dev/null at 10 and a pipe's write end at 251).
// Commands must not get them on any tier: a pipe to the host's supervisor
// or a file of the host is outside the sandbox's view. The process tier's
// agent passed both to every command.
func TestCommandsInheritNoHostDescriptor(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil { // no O_CLOEXEC: as inherited
		t.Fatal(err)
	}
	const leaked = 211
	if err := unix.Dup2(p[1], leaked); err != nil {
		t.Fatal(err)
	}
	syscall.Close(p[0])
	syscall.Close(p[1])
	t.Cleanup(func() { syscall.Close(leaked) })
	for _, tier := range []sandbox.Tier{sandbox.TierNamespace, sandbox.TierLandlock, sandbox.TierProcess} {
		t.Run(tier.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sb, err := sandbox.New(ctx, sandbox.WithDriver(local.New(local.WithTier(tier))), sandbox.AllowWeaker(tier))
			if err != nil {
				if tier != sandbox.TierProcess && sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable {
					sandboxtest.Unavailable(t, tier.String(), err.Error())
				}
				t.Fatal(err)
			}
			defer sb.Close()
			// ls, run directly, lists its own descriptors: the three
			// standard ones and the directory it reads (the lowest free: 3).
			res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"ls", "/proc/self/fd"}})
			if err != nil {
				t.Fatal(err)
			}
			fds := strings.Fields(res.Stdout)
			for _, fd := range fds {
				if fd != "0" && fd != "1" && fd != "2" && fd != "3" {
					t.Errorf("a command on the %s tier holds descriptor %s (all: %v); want only 0, 1, 2 and ls's own 3", tier, fd, fds)
				}
			}
		})
	}
}
