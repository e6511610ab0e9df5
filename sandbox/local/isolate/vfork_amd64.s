#include "textflag.h"

// The return address is kept in R12 across clone: with CLONE_VM|
// CLONE_VFORK the child runs on this very stack while the caller sleeps,
// and its own calls overwrite the slot the return address was in. This is
// the technique of the syscall package's rawVforkSyscall.

// func rawVfork(flags, ptid uintptr) (pid uintptr, errno uintptr)
TEXT ·rawVfork(SB),NOSPLIT|NOFRAME,$0-32
	MOVQ	flags+0(FP), DI
	MOVQ	$0, SI
	MOVQ	ptid+8(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
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

// func vforkExitParent(flags, ptid uintptr) (errno uintptr)
//
// Like rawVfork, but only the child returns (0). The caller, woken when
// the child has exec'd or exited, exits at once with status 0 without
// returning to a frame the child has been using.
TEXT ·vforkExitParent(SB),NOSPLIT|NOFRAME,$0-24
	MOVQ	flags+0(FP), DI
	MOVQ	$0, SI
	MOVQ	ptid+8(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX	// SYS_clone
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	NEGQ	AX
	MOVQ	AX, errno+16(FP)
	RET
ok:
	CMPQ	AX, $0
	JEQ	child
	MOVQ	$0, DI
	MOVQ	$231, AX	// SYS_exit_group
	SYSCALL
	JMP	ok
child:
	MOVQ	$0, errno+16(FP)
	RET
