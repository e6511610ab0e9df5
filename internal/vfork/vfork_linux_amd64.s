#include "textflag.h"

// func Vfork(flags, ptid, exitParent uintptr) (pid uintptr, errno uintptr)
//
// The return address is kept in R12 across clone: with CLONE_VM|
// CLONE_VFORK the child runs on this very stack while the caller sleeps,
// and its own calls overwrite the slot the return address was in (the
// technique of the syscall package's rawVforkSyscall). exitParent is read
// into R13 before the call for the same reason: the child may overwrite
// the argument slots too. With exitParent set, the caller exits (status 0)
// once woken instead of returning into a frame the child has used.
TEXT ·Vfork(SB),NOSPLIT|NOFRAME,$0-40
	MOVQ	flags+0(FP), DI
	MOVQ	$0, SI
	MOVQ	ptid+8(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	exitParent+16(FP), R13
	MOVQ	$56, AX	// SYS_clone
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$0, pid+24(FP)
	NEGQ	AX
	MOVQ	AX, errno+32(FP)
	RET
ok:
	CMPQ	AX, $0
	JEQ	done
	CMPQ	R13, $0
	JEQ	done
exit:
	MOVQ	$0, DI
	MOVQ	$231, AX	// SYS_exit_group
	SYSCALL
	JMP	exit
done:
	MOVQ	AX, pid+24(FP)
	MOVQ	$0, errno+32(FP)
	RET

// func Clone3(args unsafe.Pointer, size uintptr) (pid uintptr, errno uintptr)
//
// clone3(2) for a vfork-style child (CLONE_VM|CLONE_VFORK in args, no
// stack: the child runs on this stack while the caller sleeps), with the
// same care for the return address as Vfork. The kernel copies *args
// before the child exists.
TEXT ·Clone3(SB),NOSPLIT|NOFRAME,$0-32
	MOVQ	args+0(FP), DI
	MOVQ	size+8(FP), SI
	MOVQ	$435, AX	// SYS_clone3
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok3
	MOVQ	$0, pid+16(FP)
	NEGQ	AX
	MOVQ	AX, errno+24(FP)
	RET
ok3:
	MOVQ	AX, pid+16(FP)
	MOVQ	$0, errno+24(FP)
	RET
