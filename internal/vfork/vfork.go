// Package vfork is the raw clone of a vfork-style child (CLONE_VM|
// CLONE_VFORK, no new stack: the child runs on the caller's stack while
// the caller sleeps until it has exec'd or exited), for the two places
// that start processes without os/exec: the local backend's launch of a
// sandbox (sandbox/local/isolate) and the agent's start of a command
// (sandbox/agent/linuxrunner). It is assembly on linux/amd64; elsewhere
// Available is false and the calls fail with ENOSYS.
//
// The caller of Vfork or Clone3 must be a nosplit, norace, noinline Go
// function that never returns in the child (it execs or exits there), and
// must return at once in the parent: the child's calls have overwritten
// everything below the caller's frame. Go calls an assembly function of
// another package directly (its ABI0 symbol, no wrapper frame), so the
// only frame between the two is the caller's own.
package vfork
