// Package server is sandboxkit's in-sandbox agent: the one process that
// runs inside a sandbox's isolation boundary and serves the agent protocol
// (package agent/wire) to the host's client (package agent) over one
// multiplexed byte stream.
//
// It holds the workspace (file, search, glob, edit and tar requests,
// confined to the workspace with os.Root), the request loop with its
// per-request flow control, the egress proxy's relay, and the processes it
// starts for commands, jobs, the Python kernel and shell sessions. Entry
// points: Serve (inside a larger program: tests, the fake backend),
// ServeProcess and ServeStdio (a process whose only job is to be the agent;
// they harden the process first).
//
// Threat model: everything that reaches the agent after user code runs is
// under that code's control, so the agent bounds the memory any one
// process's output can take (per-request flow control windows, head+tail
// caps, ring buffers for jobs), confines file requests to the workspace,
// and kills everything it started when its stream ends.
package server
