//go:build linux && !amd64

package linuxrunner

// FillSpares does nothing: os/exec's start (start_exec.go) keeps no spare
// pipes.
func FillSpares() {}
