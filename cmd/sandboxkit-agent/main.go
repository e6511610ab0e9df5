// Command sandboxkit-agent is sandboxkit's in-sandbox agent as a standalone
// program: it serves the agent protocol (package sandbox/agent/server) on its
// standard input and output until standard input closes, then kills every
// process it started and exits.
//
// Backends that cannot re-exec the host program inside their boundary copy
// this binary in instead; the Docker backend copies it into each container
// and runs it as the container's PID 1 (where it also reaps orphans). Build
// it static so it depends on nothing in the image:
//
//	CGO_ENABLED=0 GOOS=linux go build -o sandboxkit-agent ./cmd/sandboxkit-agent
//
// It takes no flags: everything it needs (protocol version, workspace, base
// environment) arrives in the client's handshake over the stream, so nothing
// about the session is visible in /proc/PID/cmdline or environ. Its own
// diagnostics go to standard error. It is server.ServeStdio, the entry point
// a program that is its own agent in a container runs as well: the agent
// is undumpable and has no environment before it reads a frame (see
// server.ServeProcess).
package main

import (
	"os"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/server"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == server.ProbeArg {
		// A backend measuring its runtime's controls (server.ProbeSyscalls).
		os.Exit(server.ProbeSyscalls())
	}
	os.Exit(server.ServeStdio("sandboxkit-agent: "))
}
