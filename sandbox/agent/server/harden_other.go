//go:build !linux

package server

import "errors"

// hardenProcess refuses where the agent's protections against its own
// commands (see harden_linux.go) are not implemented: an agent that
// cannot protect its stream from the commands it runs does not serve.
func hardenProcess() error {
	return errors.New("the agent's process protections are implemented for Linux only")
}

// checkConfinement has nothing to check where hardenProcess refuses.
func checkConfinement(func(string, ...any), string) error { return nil }

// ProbeSyscalls has nothing to probe off Linux, where no agent serves.
func ProbeSyscalls() int { return 2 }
