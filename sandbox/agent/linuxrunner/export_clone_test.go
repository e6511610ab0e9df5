//go:build linux && amd64

package linuxrunner

// FillSpares makes the spare output pipes a start takes (spares), so that
// a count of the process's descriptors includes them.
func FillSpares() { spares.fill() }
