package docker

import (
	"fmt"
	"os"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
)

// hookArg is the argument with which a container runs the host program
// itself as the agent (see agentFor). It cannot collide with a real
// command line: the hook also requires being PID 1 at agentPath.
const hookArg = "__sandboxkit_docker_agent__"

// init turns this program into the agent when it was copied into a
// container as its entrypoint. It runs before main, so the user's program
// never starts there; it does nothing anywhere else.
func init() {
	if len(os.Args) != 2 || os.Args[1] != hookArg || os.Args[0] != agentPath || os.Getpid() != 1 {
		return
	}
	os.Exit(serveStdio())
}

// serveStdio serves the agent protocol on stdin/stdout and returns the exit
// status.
func serveStdio() int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "sandboxkit-agent: "+format+"\n", args...)
	}
	// The agent only serves: one P saves a thread wake-up per hand-off
	// (agent.NarrowProcs), and fewer threads count against the pids limit.
	agent.NarrowProcs()
	if err := agent.Serve(stdio{}, agent.ServeOptions{Logf: logf}); err != nil {
		logf("%v", err)
		return 1
	}
	return 0
}

// stdio joins standard input and output into one stream.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error {
	errIn := os.Stdin.Close()
	if err := os.Stdout.Close(); err != nil {
		return err
	}
	return errIn
}
