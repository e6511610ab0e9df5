//go:build !linux

package server

import (
	"os"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
)

// defaultRunner is the plain os/exec runner: the agent serves sandboxes
// only on Linux, elsewhere it runs in tests with a runner of their own.
func defaultRunner() runner.Runner { return runner.Plain() }

// isExecutable reports whether p is a regular file with an execute bit
// (lookPathIn's test of each PATH entry).
func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
