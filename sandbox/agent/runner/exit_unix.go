//go:build unix

package runner

import (
	"os"
	"syscall"
)

// exitOf returns the shell-style exit code (128+n for signal n) and the
// signal's name.
func exitOf(ps *os.ProcessState) (int, string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal().String()
	}
	return ps.ExitCode(), ""
}
