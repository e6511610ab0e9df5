// Package server is sandboxkit's in-sandbox agent: the one process that
// runs inside a sandbox's isolation boundary and serves the agent protocol
// (package agent/wire) to the host's client (package agent) over one
// multiplexed byte stream.
//
// It holds the workspace (file, search, glob, edit and tar requests,
// confined to the workspace with os.Root), the request loop with its
// per-request flow control and its table of operations (ops.go, built from
// wire's), the egress proxy's relay, and the bookkeeping of the processes
// it has started for commands, jobs, the Python kernel and shell sessions
// (output caps, rings, timeouts). The processes themselves are a
// runner.Runner's (ServeOptions.Runner): the Linux runner in sandboxes
// (package agent/linuxrunner), a scripted one in the fake backend. All of
// it is portable Go; the few system calls the workspace makes are in
// sys_*.go and search_unix.go, with portable stand-ins elsewhere.
//
// Entry points: Serve (inside a larger program: tests, the fake backend),
// ServeProcess and ServeStdio (a process whose only job is to be the agent;
// they harden the process first, and serve only on Linux).
//
// Threat model: everything that reaches the agent after user code runs is
// under that code's control, so the agent bounds the memory any one
// process's output can take (per-request flow control windows, head+tail
// caps, ring buffers for jobs), confines file requests to the workspace,
// and kills everything it started when its stream ends.
package server
