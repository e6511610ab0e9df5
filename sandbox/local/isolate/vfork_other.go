//go:build linux && !amd64

package isolate

import (
	"syscall"
	"unsafe"
)

// Launch takes the staged path on these architectures (stage init runs
// the setup program after a plain fork and exec; the vfork launch is amd64
// assembly), so rawVfork is never called.
func rawVfork(flags, ptid, exitParent uintptr) (pid uintptr, errno uintptr) {
	return 0, uintptr(syscall.ENOSYS)
}

// rawClone3 is never called either.
func rawClone3(args unsafe.Pointer, size uintptr) (pid uintptr, errno uintptr) {
	return 0, uintptr(syscall.ENOSYS)
}

const haveVfork = false
