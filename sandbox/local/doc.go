// Package local is sandboxkit's default backend: it runs the in-sandbox
// agent on this machine by re-executing the current binary, inside the
// strongest isolation the kernel offers.
//
// Launch path: the host starts /proc/self/exe with SANDBOXKIT_STAGE=init,
// the launch configuration on fd 3 (a pipe, not the environment: pitfall 11
// of docs/isolation.md) and one end of a socketpair on fd 4. The package's init
// hook (RunStage) catches the stage before main runs. For isolating tiers
// the init stage builds the boundary and execs the agent stage; for the
// process tier it serves the agent protocol directly. Everything later —
// every command, file operation and session — is started by that resident
// agent, never by a new setup.
//
// Tiers: the process tier confines file requests in the agent (os.Root) and
// applies rlimits to each command, but does not confine what commands do;
// it is used only when the caller allows it by name. Stronger tiers are
// provided by the isolation package (sandbox/local/isolate).
//
// The boundary is Linux's (namespaces, Landlock, seccomp, cgroups). On
// other systems the package builds, and Start fails with
// ISOLATION_UNAVAILABLE naming the Docker backend (sandbox/docker), which
// runs a Linux agent in a container there.
package local
