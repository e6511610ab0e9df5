// Command sandboxkit-agent is sandboxkit's in-sandbox agent as a standalone
// program: it serves the agent protocol (package sandbox/agent) on its
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
// diagnostics go to standard error.
package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
)

// stdio joins standard input and output into the single stream Serve wants.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }

// Close ends both directions, so that the host sees EOF even if a child
// process still holds a copy of our stdout.
func (stdio) Close() error {
	errIn := os.Stdin.Close()
	errOut := os.Stdout.Close()
	if errIn != nil {
		return errIn
	}
	return errOut
}

var _ io.ReadWriteCloser = stdio{}

func main() {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "sandboxkit-agent: "+format+"\n", args...)
	}
	// Commands run as the agent's uid (root in a container). A dumpable
	// agent would let them open its stdout, the protocol stream, through
	// /proc/1/fd and forge frames to the host, or its memory through
	// /proc/1/mem; undumpable, that takes CAP_SYS_PTRACE, which the
	// container does not have.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// The agent only serves: one P saves a thread wake-up per hand-off
	// (agent.NarrowProcs), and fewer threads count against the pids limit.
	agent.NarrowProcs()
	if err := agent.Serve(stdio{}, agent.ServeOptions{Logf: logf}); err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}
