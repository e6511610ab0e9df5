//go:build !unix

package runner

import "os"

// exitOf returns the process's exit code; there are no signals here.
func exitOf(ps *os.ProcessState) (int, string) { return ps.ExitCode(), "" }
