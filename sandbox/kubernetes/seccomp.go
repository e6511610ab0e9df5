package kubernetes

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// Kubernetes' seccomp RuntimeDefault is the container runtime's default
// profile, which leaves ptrace and io_uring to the kernel version: the
// escape suite's DangerousSyscalls probe measured ptrace(PTRACE_TRACEME)
// and io_uring_setup succeeding under containerd 1.6's RuntimeDefault on
// this machine. A Localhost profile would need a file installed on every
// node, so the bootstrap stacks a filter of its own on top instead (seccomp
// filters stack, and allowPrivilegeEscalation: false sets no_new_privs,
// which lets an unprivileged process add one); the agent and every
// process of the sandbox inherit it. It denies, with EPERM:
//   - ptrace and process_vm_readv/writev: reading and steering another
//     process of the sandbox user, including the agent that serves the
//     sandbox (a traced agent could be made to lie to the host);
//   - io_uring_*: an interface with a long record of kernel privilege
//     escalations, and one that bypasses per-syscall filtering;
//   - every syscall of another ABI (i386 and x32 on amd64), whose numbers
//     would slip past the list.
var deniedSyscalls = []string{"ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup", "io_uring_enter", "io_uring_register"}

// seccompArch holds what the filter needs to know of an architecture.
type seccompArch struct {
	audit uint32            // AUDIT_ARCH_* of the native ABI
	x32   bool              // syscall numbers with bit 30 set are the x32 ABI
	nr    map[string]uint32 // syscall numbers of deniedSyscalls
}

var seccompArches = map[string]seccompArch{
	"amd64": {audit: 0xc000003e, x32: true, nr: map[string]uint32{
		"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
		"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}},
	"arm64": {audit: 0xc00000b7, nr: map[string]uint32{
		"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
		"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}},
}

// Classic BPF and seccomp constants (linux/filter.h, linux/seccomp.h).
const (
	bpfLdWAbs = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK   = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfRetK   = 0x06 // BPF_RET | BPF_K
	retAllow  = 0x7fff0000
	retErrno  = 0x00050000
	eperm     = 1
	offNr     = 0 // seccomp_data.nr
	offArch   = 4 // seccomp_data.arch
	x32Bit    = 0x40000000
)

// seccompFilter returns the filter for arch as hex-encoded struct
// sock_filter records (the bootstrap installs it with prctl), or "" when
// there is none for arch.
func seccompFilter(arch string) string {
	a, ok := seccompArches[arch]
	if !ok {
		return ""
	}
	var prog []byte
	ins := func(code uint16, jt, jf uint8, k uint32) {
		var b [8]byte
		binary.LittleEndian.PutUint16(b[0:], code)
		b[2], b[3] = jt, jf
		binary.LittleEndian.PutUint32(b[4:], k)
		prog = append(prog, b[:]...)
	}
	deny := func() { ins(bpfRetK, 0, 0, retErrno|eperm) }
	ins(bpfLdWAbs, 0, 0, offArch)
	ins(bpfJeqK, 1, 0, a.audit) // native ABI: skip the denial
	deny()
	ins(bpfLdWAbs, 0, 0, offNr)
	if a.x32 {
		ins(bpfJgeK, 0, 1, x32Bit)
		deny()
	}
	for _, name := range deniedSyscalls {
		ins(bpfJeqK, 0, 1, a.nr[name])
		deny()
	}
	ins(bpfRetK, 0, 0, retAllow)
	return hex.EncodeToString(prog)
}

// seccompMechanism describes the syscall filtering for Info.
func seccompMechanism(filter string) string {
	if filter == "" {
		return "seccomp RuntimeDefault only"
	}
	return "seccomp RuntimeDefault plus a filter denying " + strings.Join(deniedSyscalls, ", ") + " and foreign ABIs"
}
