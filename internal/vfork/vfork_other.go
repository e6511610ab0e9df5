//go:build !(linux && amd64)

package vfork

import (
	"syscall"
	"unsafe"
)

// Available reports whether Vfork and Clone3 are implemented here: not on
// this platform (the callers take os/exec or the staged launch instead).
const Available = false

// Vfork is not implemented here.
func Vfork(flags, ptid, exitParent uintptr) (pid uintptr, errno uintptr) {
	return 0, uintptr(syscall.ENOSYS)
}

// Clone3 is not implemented here.
func Clone3(args unsafe.Pointer, size uintptr) (pid uintptr, errno uintptr) {
	return 0, uintptr(syscall.ENOSYS)
}
