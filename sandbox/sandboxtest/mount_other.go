//go:build !linux

package sandboxtest

import "testing"

func smallFileSystem(t *testing.T, size int64) string {
	t.Skip("a small file system for the workspace is mounted on Linux only")
	return ""
}
