//go:build !amd64

package isolate

import "syscall"

// Launch uses the staged path on these architectures (the seccomp filter
// is written for amd64 only), so rawVfork is never called.
func rawVfork(flags, ptid, exitParent uintptr) (pid uintptr, errno uintptr) {
	return 0, uintptr(syscall.ENOSYS)
}

const haveVfork = false
