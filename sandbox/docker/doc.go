// Package docker is sandboxkit's Docker backend: one container per sandbox,
// with sandboxkit's agent as the container's PID 1, spoken to over the
// container's attach stream (stdin/stdout, demultiplexed). Every command,
// file operation, bash session and Python cell then travels over that one
// stream to the resident agent, so a tool call costs what it costs inside the
// container, not a `docker exec` (an exec is a round of API calls, a runc
// exec and a new process tree per command).
//
// It talks to the engine with github.com/docker/docker's client, negotiating
// the API version, so it works with Debian's engine (API 1.41) and newer
// ones, local or remote. The engine is found as the docker CLI finds it
// (engine.go): WithHost or WithContext; else DOCKER_HOST (with
// DOCKER_TLS_VERIFY and DOCKER_CERT_PATH); else DOCKER_CONTEXT; else the
// CLI's current context (`docker context use`); else the default socket.
// An ssh:// host goes through the docker CLI's connection helper (`ssh HOST
// docker system dial-stdio`), contexts through its context store.
//
// # How the agent gets into the container
//
// The agent must not depend on anything in the image, so it is a static
// Linux binary, and it reaches the container through the engine's API only
// (CopyToContainer), which works with a remote DOCKER_HOST, unlike a bind
// mount of a host file. The binary is put once per engine and binary into a
// named volume, sandboxkit-agent-<sha256 prefix>, through a helper container
// that is created, never started, and removed; every sandbox mounts that
// volume read-only at /.sandboxkit and runs /.sandboxkit/agent as PID 1.
// (Copying into each container instead would cost a chrooted untar per
// sandbox, ~200 ms here, and a read-only root file system needs a volume
// anyway.) The file is owned by root, mode 0555, on a read-only mount: the
// sandbox cannot replace what serves it. The binary is chosen in this order:
//
//  1. the path given by WithAgentBinary or the "agent" option;
//  2. the path in $SANDBOXKIT_AGENT;
//  3. the running program itself, when it is a static ELF binary for the
//     engine's architecture (build your program with CGO_ENABLED=0): this
//     package's init hook turns it into the agent inside the container, so a
//     deployed program needs nothing else;
//  4. `CGO_ENABLED=0 go build` of github.com/sandboxkit/sandboxkit/cmd/sandboxkit-agent
//     for the engine's architecture, once per process, into the user cache
//     directory (development and tests, where a Go toolchain is present).
//
// # Workspace
//
// By default the workspace is a tmpfs at /workspace owned by the sandbox
// user and sized by Limits.DiskBytes, which makes the disk quota a hard limit
// enforced by the kernel and works with any engine, local or remote. Its
// contents live as long as the sandbox: copy results out through the
// sandbox's file API before Close. A directory given as
// driver.Config.Workspace is bind-mounted instead. The engine mounts its
// own machine's directory of that name, so with an engine reached other
// than through a local socket (tcp://, ssh://, a context: possibly another
// machine) it is refused unless WithWorkspaceOnEngine says the path exists
// there; Info then reports it as the engine's (engine_workspace,
// engine_host), not as a directory of this machine. A bind mount cannot
// enforce a disk quota, so a DiskBytes limit with one is refused.
//
// # Threat model
//
// Code in the container is hostile. The container gets: no network
// (network mode none: only lo), every capability dropped,
// no-new-privileges, a seccomp profile of its own (Docker's default
// allowlist without ptrace, process_vm_readv/writev and io_uring, sent
// with every container so that old engines, which allow those, apply it
// too), a read-only root file system with writable tmpfs (nosuid, nodev;
// exec, so that scripts and builds run as on every backend) at /workspace
// and /tmp only, an unprivileged user (65534:65534 unless told otherwise),
// cgroup memory (without swap) and pids limits, and a private pid
// namespace in which the agent is PID 1 and reaps orphans. The CPU-time
// limit is a per-process rlimit that the agent sets on each child (the
// control says so as data, Rlimit and SetByAgent, which tell package
// sandbox to ask the agent for it): an engine ulimit would bind the agent
// itself, and PID 1 would die of its own accumulated CPU time. File size
// and open files are engine ulimits, inherited by every process. A runtime
// other than runc (gVisor's runsc) is measured at its first use with cheap
// versions of the escape suite's probes (measure.go) and refused, naming
// the probe, unless every control holds there.
// The agent's stream is untrusted input for the host (package agent
// bounds it). What the engine cannot do it refuses rather than weakens:
// the backend inspects the created container and fails with
// ISOLATION_UNAVAILABLE when a control is missing. A host that crashes
// leaves no running container behind for long: the attach stream closes,
// the agent sees EOF on stdin and exits, and the engine removes the
// container (auto-remove); GC removes any leftovers by label.
//
// # Egress
//
// A sandbox with an egress policy (sandbox.WithEgress) keeps network mode
// none; the agent runs the HTTP proxy on the container's loopback. With an
// engine on this machine (a unix socket) the container also gets one bind
// mount, /run/sandboxkit-egress.sock, a unix socket the host's egress
// proxy listens on: the agent hands each connection its proxy accepts to
// the host there (the socket itself, as a descriptor), and the host serves
// it directly, which the attach stream (bytes only, copied by the engine)
// could not do at a useful speed. The host takes there only sockets the
// proxy accepted (bound to its address): whatever else in the container
// connects gets its connection closed (egress_handoff.go). The socket is
// removed with the sandbox.
// With a remote engine the connections' bytes are carried over the attach
// stream instead.
package docker
