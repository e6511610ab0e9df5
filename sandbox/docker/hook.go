package docker

import (
	"os"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/server"
)

// hookArg is the argument with which a container runs the host program
// itself as the agent (see agentFor). It cannot collide with a real
// command line: the hook also requires being PID 1 at agentPath.
const hookArg = "__sandboxkit_docker_agent__"

// init turns this program into the agent when it was copied into a
// container as its entrypoint. It runs before main, so the user's program
// never starts there; it does nothing anywhere else. The agent is served
// by server.ServeStdio, the same entry point as cmd/sandboxkit-agent's, so
// it gets the same protections (undumpable, no environment) and the same
// thread warm-up.
func init() {
	if len(os.Args) == 2 && os.Args[0] == agentPath && os.Args[1] == server.ProbeArg {
		// The creation-time measurement runs the binary as its probe.
		os.Exit(server.ProbeSyscalls())
	}
	if len(os.Args) != 2 || os.Args[1] != hookArg || os.Args[0] != agentPath || os.Getpid() != 1 {
		return
	}
	os.Exit(server.ServeStdio("sandboxkit-agent: "))
}
