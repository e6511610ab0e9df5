//go:build linux

package isolate

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/internal/vfork"
)

// A program is the whole boundary as a flat list of system calls whose
// arguments were all computed beforehand: strings, structs, the seccomp
// filter and the Landlock rules are built in ordinary Go, and running the
// list needs no allocation, no stack growth and no scheduler. That is what
// lets the launcher run it in a vforked child of the host process, between
// clone and execve (the way the syscall package's own forkExec child
// works), so the sandbox costs one exec of the agent instead of a Go
// start for the setup plus a second one for the agent, and no copy of the
// host's page tables. Enter runs the same
// list in the re-executed stage init where a step needs real Go code (the
// copy of a quota'd workspace, an opHook).
type program struct {
	ops []sysOp
	// slots hold results (file descriptors) that later steps use.
	slots [maxSlots]uintptr
	nslot int
	// keep holds every buffer whose address is in an op's arguments.
	keep []any
	// fail is the report a forked child writes to errFD before exiting.
	fail  [2]uint32
	errFD int
	// oldMask is the launcher thread's signal mask, which the child
	// restores just before execve (all signals are blocked across clone).
	oldMask uint64
	// pid1 receives the host pid of the namespace tier's PID 1 (opVfork
	// with CLONE_PARENT_SETTID).
	pid1 int32
	// clone, when clone.flags is set, starts the forked child with
	// clone3 instead of clone: CLONE_INTO_CGROUP puts it in the sandbox's
	// cgroup v2 from its first instruction (see launchForked).
	clone cloneArgs
}

// cloneArgs is the kernel's struct clone_args up to its cgroup field
// (CLONE_ARGS_SIZE_VER2).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

const maxSlots = 64

// sysOp is one step: a system call, an int32 store (opPatch) or a pause
// that hands control back to Go code (opHook).
type sysOp struct {
	kind uint8
	// flags: opOKExist, opIgnoreErr, opWantOne.
	flags uint8
	// fromSlot has bit i set when args[i] is a slot number whose value is
	// passed instead.
	fromSlot uint8
	// store is 1 + the slot the result goes to; 0 for none.
	store uint8
	trap  uintptr
	args  [6]uintptr
	// patch receives the value of slot args[0] (opPatch).
	patch *int32
	// what names the step in errors.
	what string
}

const (
	opSyscall = iota
	opPatch
	opHook
	opVfork // vfork.Vfork(args[0], args[1], exit the caller): the rest runs in the child
)

const (
	opOKExist   = 1 << iota // EEXIST is success (mkdir of an existing dir)
	opIgnoreErr             // any error is ignored
	opWantOne               // the call must return 1 (a one-byte read)
)

// str returns the address of a NUL-terminated copy of s, kept alive by p.
func (p *program) str(s string) uintptr {
	b := append([]byte(s), 0)
	p.keep = append(p.keep, b)
	return uintptr(unsafe.Pointer(&b[0]))
}

// strv returns the address of a NULL-terminated array of C strings.
func (p *program) strv(ss []string) uintptr {
	v := make([]uintptr, len(ss)+1)
	for i, s := range ss {
		v[i] = p.str(s)
	}
	p.keep = append(p.keep, v)
	return uintptr(unsafe.Pointer(&v[0]))
}

// addr returns the address of *v, a heap value kept alive by p.
func addr[T any](p *program, v *T) uintptr {
	p.keep = append(p.keep, v)
	return uintptr(unsafe.Pointer(v))
}

// slot reserves a slot for a result.
func (p *program) slot() int {
	if p.nslot == maxSlots {
		panic("isolate: program needs more than maxSlots slots")
	}
	p.nslot++
	return p.nslot - 1
}

// sys appends a system call and returns it for further settings.
func (p *program) sys(what string, trap uintptr, args ...uintptr) *sysOp {
	op := sysOp{kind: opSyscall, trap: trap, what: what}
	copy(op.args[:], args)
	p.ops = append(p.ops, op)
	return &p.ops[len(p.ops)-1]
}

// into stores the call's result in slot s.
func (op *sysOp) into(s int) *sysOp { op.store = uint8(s + 1); return op }

// slotArg makes argument i the value of slot s.
func (op *sysOp) slotArg(i, s int) *sysOp {
	op.args[i] = uintptr(s)
	op.fromSlot |= 1 << i
	return op
}

// with sets flags.
func (op *sysOp) with(flags uint8) *sysOp { op.flags |= flags; return op }

// patchInt32 stores the value of slot s into *dst when the program gets
// there (a descriptor inside a struct a later call reads).
func (p *program) patchInt32(dst *int32, s int) {
	p.keep = append(p.keep, dst)
	p.ops = append(p.ops, sysOp{kind: opPatch, patch: dst, args: [6]uintptr{uintptr(s)}, what: "patch"})
}

// hook makes run return to its caller, which does a step in Go and runs
// the rest.
func (p *program) hook(what string) {
	p.ops = append(p.ops, sysOp{kind: opHook, what: what})
}

// hasHooks reports whether the program needs Go code between its steps
// (and so cannot run in a forked child).
func (p *program) hasHooks() bool {
	for i := range p.ops {
		if p.ops[i].kind == opHook {
			return true
		}
	}
	return false
}

// run executes the ops from index from on the calling thread. It returns
// the index after an opHook (hook true), len(ops) when all ran, or the
// index of the failing op and its errno. It must stay nosplit and
// allocation-free: in a forked child it runs on a copy of the parent's
// stack with no runtime behind it.
//
//go:nosplit
//go:norace
func (p *program) run(from int) (next int, hook bool, errno syscall.Errno) {
	for i := from; i < len(p.ops); i++ {
		op := &p.ops[i]
		switch op.kind {
		case opHook:
			return i + 1, true, 0
		case opPatch:
			*op.patch = int32(p.slots[op.args[0]])
			continue
		case opVfork:
			if _, e := vfork.Vfork(op.args[0], op.args[1], 1); e != 0 {
				return i, false, syscall.Errno(e)
			}
			continue
		}
		a := op.args
		for j := 0; j < 6; j++ {
			if op.fromSlot&(1<<j) != 0 {
				a[j] = p.slots[a[j]]
			}
		}
		r1, _, e := syscall.RawSyscall6(op.trap, a[0], a[1], a[2], a[3], a[4], a[5])
		if e != 0 {
			if op.flags&opIgnoreErr != 0 || (op.flags&opOKExist != 0 && e == syscall.EEXIST) {
				continue
			}
			return i, false, e
		}
		if op.flags&opWantOne != 0 && r1 != 1 {
			return i, false, syscall.EPIPE
		}
		if op.store != 0 {
			p.slots[op.store-1] = r1
		}
	}
	return len(p.ops), false, 0
}

// vforkRun starts a child with CLONE_VM|CLONE_VFORK (flags adds to
// them; with p.clone set, clone3 with p.clone instead) that runs p on the
// caller's stack, ending in execve or, on failure,
// writing {op index, errno} to p.errFD and exiting 127; the caller sleeps
// until then. All signals must be blocked on the calling thread: the child
// has no runtime to run a Go signal handler.
//
//go:nosplit
//go:norace
func vforkRun(p *program, flags uintptr) (pid uintptr, errno syscall.Errno) {
	var r1, e uintptr
	if p.clone.flags != 0 {
		r1, e = vfork.Clone3(unsafe.Pointer(&p.clone), unsafe.Sizeof(p.clone))
	} else {
		r1, e = vfork.Vfork(flags|syscall.CLONE_VM|syscall.CLONE_VFORK, 0, 0)
	}
	if e != 0 || r1 != 0 {
		// The caller must return at once: the child has used this frame.
		return r1, syscall.Errno(e)
	}
	childMain(p)
	return 0, 0
}

// childMain runs p in the child and never returns.
//
//go:nosplit
//go:norace
func childMain(p *program) {
	next, _, e := p.run(0)
	if e == 0 {
		// A program for a child ends in execve; falling off its end
		// is a bug in the builder.
		e = syscall.ENOEXEC
	}
	p.fail[0] = uint32(next)
	p.fail[1] = uint32(e)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(p.errFD), uintptr(unsafe.Pointer(&p.fail[0])), 8)
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 127, 0, 0)
	}
}

// blockSignals blocks every signal on the calling thread (which must be
// locked to its goroutine) and saves the old mask in p.
func (p *program) blockSignals() syscall.Errno {
	all := ^uint64(0)
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&p.oldMask)), 8, 0, 0)
	return e
}

// restoreSignals puts back the mask blockSignals saved.
func (p *program) restoreSignals() {
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&p.oldMask)), 0, 8, 0, 0)
}

// atCWD is AT_FDCWD as a raw syscall argument.
var atCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()
