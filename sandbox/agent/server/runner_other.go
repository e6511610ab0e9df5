//go:build !linux

package server

import "github.com/sandboxkit/sandboxkit/sandbox/agent/runner"

// defaultRunner is the plain os/exec runner: the agent serves sandboxes
// only on Linux, elsewhere it runs in tests with a runner of their own.
func defaultRunner() runner.Runner { return runner.Plain() }
