package isolate

import "unsafe"

// rawVfork is clone(2) with the given flags (CLONE_VM|CLONE_VFORK among
// them) and no new stack. It returns in the child (pid 0), which runs on
// the caller's stack and must never return from the function that called
// rawVfork, and, once the child has exec'd or exited, in the caller; with
// exitParent set the caller exits with status 0 instead. ptid receives the
// child's pid with CLONE_PARENT_SETTID.
func rawVfork(flags, ptid, exitParent uintptr) (pid uintptr, errno uintptr)

// rawClone3 is clone3(2) with args (a *cloneArgs of size bytes) for a
// vfork-style child: like rawVfork without exitParent, it returns in the
// child (pid 0) on the caller's stack and in the caller once the child has
// exec'd or exited.
func rawClone3(args unsafe.Pointer, size uintptr) (pid uintptr, errno uintptr)

const haveVfork = true
