package isolate

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside every sandbox. Capabilities are
// already gone when the filter is installed, so most of these would fail
// anyway; the filter is the second wall for the day a capability check has
// a hole, and the only wall for the ones that need no capability at all
// (userfaultfd, io_uring, perf_event_open, keyctl, ptrace of a sibling,
// unshare of a user namespace).
var deniedSyscalls = []uintptr{
	// Mount table changes: a process with capabilities in the user
	// namespace remounted a read-only bind read-write (docs/isolation.md, pitfall 1).
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_OPEN_TREE, unix.SYS_OPEN_TREE_ATTR, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	// New namespaces: a fresh user namespace gives back every capability.
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	// Tracing: PTRACE_TRACEME made the host's Go parent the tracer.
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_KCMP,
	// Large kernel attack surface, rarely needed by agent code.
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_FANOTIFY_INIT,
	// Whole-machine state.
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
	unix.SYS_DELETE_MODULE, unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_SYSLOG, unix.SYS_SETTIMEOFDAY,
	unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX, unix.SYS_IOPL, unix.SYS_IOPERM,
	unix.SYS_VHANGUP, unix.SYS_USELIB, unix.SYS__SYSCTL, unix.SYS_LOOKUP_DCOOKIE,
}

// nsCloneFlags are the clone(2) flags that create namespaces; clone with
// any of them fails with EPERM.
const nsCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian
	offArg1 = 24
)

// sockTypeMask selects the socket type from socket(2)'s and
// socketpair(2)'s type argument, whose other bits are SOCK_NONBLOCK and
// SOCK_CLOEXEC.
const sockTypeMask = 0xf

// x32ABI marks x32 syscall numbers, which reach the same kernel entry
// points under other numbers and would slip past the deny-list.
const x32ABI = 0x40000000

type bpfProg []unix.SockFilter

func (p *bpfProg) stmt(code uint16, k uint32) {
	*p = append(*p, unix.SockFilter{Code: code, K: k})
}

// retIf appends "if A == k return ret".
func (p *bpfProg) retIf(k, ret uint32) {
	*p = append(*p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: k})
	p.stmt(unix.BPF_RET|unix.BPF_K, ret)
}

func errnoRet(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

// socketRules say which sockets seccomp lets a sandbox make. The namespace
// tier needs none (its net namespace holds only lo, its mount namespace no
// host socket); the landlock tier shares the host's network stack and
// filesystem, so seccomp is what keeps it off the network and, below
// Landlock ABI 9, off the host's unix sockets (see landlockTierSockets).
type socketRules struct {
	// inet allows socket(2) for every family but AF_UNIX (network shared).
	inet bool
	// unix allows socket(AF_UNIX, ...). Without it, socketpair(2) is
	// allowed only for SOCK_STREAM and SOCK_SEQPACKET pairs.
	unix bool
}

// allSockets is no socket filter at all.
var allSockets = socketRules{inet: true, unix: true}

// landlockTierSockets is the landlock tier's socket filter. Without
// network, no socket family but AF_UNIX. Below Landlock ABI 9 (this
// project's machines have 7) Landlock does not mediate connect() to a
// pathname unix socket: a command ran `curl --unix-socket
// /var/run/docker.sock http://x/version` and got the host's Docker engine,
// which is host root for a user in the docker group (issue 25). seccomp
// cannot see the path connect() is given (it is in memory BPF cannot read)
// and a socket's address length does not tell a pathname from an abstract
// one, so the only wall it can build is to make no unix socket at all:
// socket(AF_UNIX) fails with EACCES. What is left are socketpair(2) pairs,
// which are born connected to each other; a stream or seqpacket pair
// refuses connect() (EISCONN) and ignores a sendto() address, but a
// datagram pair would send to any path (sendto /dev/log) or connect() to
// one again, so datagram pairs are refused as well. Measured cost with the
// sandbox's Python 3.11 (TestLandlockTierUnixSocketCost): multiprocessing
// with its default start method (fork), Pool, Queue, Pipe and asyncio
// subprocesses still work; multiprocessing.Manager and the forkserver
// start method (their servers listen on a unix socket in TMPDIR) and any
// other unix-socket server inside the sandbox (tmux, syslog) fail with
// PermissionError; ssh and git over ssh work where the network is allowed
// (they need TCP, not unix sockets). From ABI 9 on, Landlock's own
// LANDLOCK_ACCESS_FS_RESOLVE_UNIX right allows connect() only to sockets in
// the workspace and TMPDIR (landlockTierPolicy), and unix sockets are
// allowed again.
//
// Narrower walls were weighed and not taken. Landlock's ABI 6 scope covers
// abstract sockets and signals only (it is applied; it does not help with
// paths). A seccomp user-notification supervisor on connect() can read the
// path, but the kernel reads the address again after the supervisor lets
// the call continue, and another thread of the caller can swap it in
// between: the supervisor would have to make the connection itself
// (pidfd_getfd, then connect on the host side), with the host's
// credentials, outside the sandbox's Landlock domain (so an abstract
// address would escape the scope) and at a host round trip per connect(),
// for datagram sends (sendmsg's address is in memory too) as well. That is
// a second boundary to get right, for Manager and private sockets.
func landlockTierSockets(network bool, abi int) socketRules {
	return socketRules{inet: network, unix: abi >= 9}
}

// seccompProgram builds the filter; sock says which sockets it allows.
func seccompProgram(sock socketRules) (bpfProg, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("isolate: the seccomp filter is written for amd64, not %s", runtime.GOARCH)
	}
	var p bpfProg
	// A foreign architecture's syscall numbers mean other syscalls: kill.
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, Jf: 0, K: unix.AUDIT_ARCH_X86_64})
	p.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS)
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
	p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 0, Jf: 1, K: x32ABI})
	p.stmt(unix.BPF_RET|unix.BPF_K, errnoRet(unix.EPERM))
	for _, nr := range deniedSyscalls {
		p.retIf(uint32(nr), errnoRet(unix.EPERM))
	}
	// clone3 passes its flags in memory that BPF cannot read: ENOSYS makes
	// libc and Go fall back to clone, whose flags are checked below.
	p.retIf(unix.SYS_CLONE3, errnoRet(unix.ENOSYS))

	// The argument checks below load a new A, so each ends in a return.
	argCheck := func(nr uint32, build func(q *bpfProg)) {
		var q bpfProg
		build(&q)
		p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: uint8(len(q)), K: nr})
		p = append(p, q...)
	}
	argCheck(unix.SYS_CLONE, func(q *bpfProg) {
		q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
		*q = append(*q, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: 0, Jf: 1, K: nsCloneFlags})
		q.stmt(unix.BPF_RET|unix.BPF_K, errnoRet(unix.EPERM))
		q.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	})
	// TIOCSTI and TIOCLINUX push input into a terminal another process
	// reads from.
	argCheck(unix.SYS_IOCTL, func(q *bpfProg) {
		q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg1)
		q.retIf(unix.TIOCSTI, errnoRet(unix.EPERM))
		q.retIf(unix.TIOCLINUX, errnoRet(unix.EPERM))
		q.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	})
	switch {
	case sock.inet && sock.unix:
	case sock.inet:
		// Landlock's TCP rules do not cover MPTCP or UDP (both got
		// through in experiments): without network, seccomp is the wall.
		argCheck(unix.SYS_SOCKET, func(q *bpfProg) {
			q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
			q.retIf(unix.AF_UNIX, errnoRet(unix.EACCES))
			q.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
		})
	case sock.unix:
		argCheck(unix.SYS_SOCKET, func(q *bpfProg) {
			q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
			q.retIf(unix.AF_UNIX, unix.SECCOMP_RET_ALLOW)
			q.stmt(unix.BPF_RET|unix.BPF_K, errnoRet(unix.EACCES))
		})
	default:
		p.retIf(unix.SYS_SOCKET, errnoRet(unix.EACCES))
	}
	if !sock.unix {
		// Only pairs that are connected for good (see landlockTierSockets).
		argCheck(unix.SYS_SOCKETPAIR, func(q *bpfProg) {
			q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg1)
			q.stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, sockTypeMask)
			q.retIf(unix.SOCK_STREAM, unix.SECCOMP_RET_ALLOW)
			q.retIf(unix.SOCK_SEQPACKET, unix.SECCOMP_RET_ALLOW)
			q.stmt(unix.BPF_RET|unix.BPF_K, errnoRet(unix.EACCES))
		})
	}
	p.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	if len(p) > 4096 {
		return nil, fmt.Errorf("isolate: seccomp program too long (%d)", len(p))
	}
	return p, nil
}
