package sandboxtest

import "os"

// killPID ends the host process pid. The suite finds processes through
// /proc, so on Windows it is reached only with a pid a backend reported.
func killPID(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// gone reports whether the host process pid no longer exists.
func gone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	p.Release()
	return false
}
