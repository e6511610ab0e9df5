//go:build linux

package server

import (
	"github.com/sandboxkit/sandboxkit/sandbox/agent/linuxrunner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
)

// defaultRunner is the Linux runner: process groups, rlimits, reaping.
func defaultRunner() runner.Runner { return linuxrunner.New(linuxrunner.Options{}) }
