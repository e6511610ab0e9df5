//go:build !linux

package mcp

import "os"

// pollableStdin returns nil where standard input cannot be reopened as a
// file the poller waits on: a LineTransport reads it from a goroutine.
func pollableStdin() *os.File { return nil }
