package vfork

import "unsafe"

// Available reports whether Vfork and Clone3 are implemented here.
const Available = true

// Vfork is clone(2) with flags (CLONE_VM|CLONE_VFORK among them) and no
// new stack. It returns in the child (pid 0), and, once the child has
// exec'd or exited, in the caller; with exitParent set the caller exits
// with status 0 instead of returning (into a frame the child has used).
// ptid is clone's parent_tid argument: where the kernel stores the child's
// pid with CLONE_PARENT_SETTID, or its pidfd with CLONE_PIDFD.
func Vfork(flags, ptid, exitParent uintptr) (pid uintptr, errno uintptr)

// Clone3 is clone3(2) with args (a struct clone_args of size bytes) for a
// vfork-style child: like Vfork without exitParent. The kernel copies
// *args before the child exists.
func Clone3(args unsafe.Pointer, size uintptr) (pid uintptr, errno uintptr)
