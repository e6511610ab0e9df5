package isolate

// rawVfork is clone(2) with the given flags (CLONE_VM|CLONE_VFORK among
// them) and no new stack: it returns in the child (pid 0), which runs on
// the caller's stack and must never return from the function that called
// rawVfork, and in the caller once the child has exec'd or exited. ptid
// receives the child's pid with CLONE_PARENT_SETTID.
func rawVfork(flags, ptid uintptr) (pid uintptr, errno uintptr)

// vforkExitParent is clone(2) like rawVfork, but the calling process exits
// with status 0 once the child has exec'd or exited; only the child (or an
// error) returns.
func vforkExitParent(flags, ptid uintptr) (errno uintptr)

const haveVfork = true
