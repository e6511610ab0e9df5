//go:build linux

#include "textflag.h"

// func rawVfork(flags, ptid uintptr) (pid uintptr, errno uintptr)
//
// clone(flags, no new stack, ptid) for a vfork-style child that runs on
// this stack while the caller sleeps. The child's calls overwrite the slot
// of this function's return address, so it is kept in R12 (the kernel
// preserves it in both) and pushed back after the call; the arguments
// are read before it.
TEXT ·rawVfork(SB),NOSPLIT|NOFRAME,$0-32
	MOVQ	flags+0(FP), DI
	MOVQ	ptid+8(FP), DX
	XORQ	SI, SI
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$56, AX	// SYS_clone
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$0, pid+16(FP)
	NEGQ	AX
	MOVQ	AX, errno+24(FP)
	RET
ok:
	MOVQ	AX, pid+16(FP)
	MOVQ	$0, errno+24(FP)
	RET
