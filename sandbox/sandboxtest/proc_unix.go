//go:build !windows

package sandboxtest

import "syscall"

// killPID sends SIGKILL to the host process pid.
func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// gone reports whether the host process pid no longer exists.
func gone(pid int) bool { return syscall.Kill(pid, 0) != nil }
