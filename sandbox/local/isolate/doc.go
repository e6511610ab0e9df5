// Package isolate builds the kernel boundary of sandboxkit's local backend:
// Linux user, mount, pid, net, ipc, uts and cgroup namespaces, a read-only
// view of the host's system directories, Landlock, a seccomp deny-list,
// capabilities dropped, rlimits and cgroups. It holds only the mechanisms;
// the launcher (sandbox/local) starts the processes and the agent
// (sandbox/agent/server) serves requests inside.
//
// # Threat model
//
// Everything that runs inside the sandbox is hostile: code an LLM wrote,
// possibly steered by prompt injection. It may try to read host secrets,
// write outside its workspace, reach the network, signal or trace host
// processes, exhaust the host's memory, pids or disk, or outlive the
// sandbox. The host process (the Go program importing sandboxkit) and the
// kernel are trusted. A kernel bug is out of scope; a missing control is
// not: what cannot be enforced is refused by Prepare or listed as a gap in
// Report, never silently skipped.
//
// # Life of a sandbox
//
// Host side: Prepare decides the plan for a Spec on this machine (tier,
// cgroups, uid mapping) or refuses it with an error naming what is missing.
// Handle.Launch starts the agent; Freeze, Thaw, KillAll, SaveWorkspace and
// Cleanup act on the running sandbox; Report says exactly which mechanism
// enforces each control.
//
// Launch builds the whole boundary as a program: a flat list of system
// calls whose arguments (paths, mount attributes, the Landlock rules, the
// seccomp filter) are all computed by the host beforehand (program.go,
// enter.go). It vforks the host process from a locked, long-lived thread
// (CLONE_VM|CLONE_VFORK: no copy of the host's page tables); the child
// runs the program on that thread's stack with no Go runtime behind it
// (nosplit, no allocation, the way the syscall package's own forkExec
// child works). It joins the sandbox's cgroups; in the namespace tier it
// drops to the sandbox's host uid, makes the user namespace, writes its own
// uid and gid maps, unshares the other namespaces and vforks PID 1 as the
// host's child (CLONE_PARENT), then exits; PID 1 builds the rest and ends
// in execve of the agent stage. Every per-thread attribute (capabilities, securebits,
// no_new_privs, the Landlock domain, the seccomp filter) is set on that one
// thread, so the agent starts with exactly that state; this also works
// where cgo is linked (go test -race), where syscall.AllThreadsSyscall is
// unavailable. A failing step is reported to the host by its name and
// errno. One exec in all: the setup costs no Go start of its own.
//
// A boundary whose setup needs Go code between the steps (a disk quota:
// its tmpfs is seeded with a copy of the workspace) is built by stage
// "init" instead: Launch starts the binary with SysProcAttr, and Enter runs
// the same program there, with the copy at its hook, and execs the agent.
//
// Child, stage "agent": Complete checks that the boundary is in force and
// makes the agent a child subreaper in the landlock tier. With a v1 pids
// cgroup, every command joins a child cgroup limited to Limits.Pids
// (CommandsCgroup: the command's forked child moves itself in before
// execve, or it is forked by a thread of the agent that moved in): a fork
// bomb fills that child while the agent keeps AgentTaskReserve tasks of
// room in the parent. Without one, Complete first makes the agent's
// threads while the limit has room (the warm-up).
//
// # Tiers
//
// TierNamespace needs user namespaces in which mounts work (detected by
// trying: a clone(CLONE_NEWUSER) that may not mount, as under Ubuntu's
// AppArmor restriction, does not count). TierLandlock is for hosts without
// them: Landlock confines the filesystem, seccomp refuses every socket
// family but AF_UNIX when there is no network and, below Landlock ABI 9
// (which cannot mediate connect() to a socket path), AF_UNIX too, so the
// host's unix sockets (docker.sock, D-Bus, ssh-agent) stay out
// (landlockTierSockets); the agent is a subreaper; host pids stay visible
// (Landlock's signal scope stops signals to them on ABI 6+). The process
// tier gets nothing from this package but Rlimits.
//
// # Identity
//
// The sandbox's root is mapped to one unprivileged host uid, never to host
// root: when the host runs as root, Prepare picks a fresh uid (and gid) per
// workspace from a reserved range, so file permissions alone deny
// /etc/shadow and RLIMIT_NPROC applies (to all sandboxes on the workspace); when the host is unprivileged it is the host
// user's own uid. As root, the uid belongs to the workspace and is shared
// by every sandbox on it: the first gives the files to it, the last one's
// Cleanup (or GCWorkspaces after a host's death) gives each file back to
// its recorded owner (wsowner.go).
//
// # Disk quota
//
// With Limits.DiskBytes set, /workspace is a tmpfs of exactly that size
// (a hard quota: writes past it fail with ENOSPC), seeded by Enter with a
// copy of the host workspace. The data lives in that tmpfs, in memory,
// charged to the sandbox's memory cgroup, so Prepare refuses a quota plus
// /tmp size that does not fit under the memory limit. The host directory
// is not changed while the sandbox runs: Handle.SaveWorkspace copies the
// tmpfs back into it (the launcher calls it before KillAll when the
// workspace is kept, and CopyOut can read the live tmpfs through
// Handle.WorkspaceRoot). Without DiskBytes the host directory itself is
// bind-mounted read-write and there is no quota.
package isolate
