//go:build linux

package isolate

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside every sandbox. Capabilities are
// already gone when the filter is installed, so most of these would fail
// anyway; the filter is the second wall for the day a capability check has
// a hole, and the only wall for the ones that need no capability at all
// (userfaultfd, io_uring, perf_event_open, keyctl, ptrace of a sibling,
// unshare of a user namespace).
var deniedSyscalls = []string{
	// Mount table changes: a process with capabilities in the user
	// namespace remounted a read-only bind read-write (docs/isolation.md, pitfall 1).
	"mount", "umount2", "pivot_root", "chroot",
	"open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// New namespaces: a fresh user namespace gives back every capability.
	"unshare", "setns",
	// Tracing: PTRACE_TRACEME made the host's Go parent the tracer.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	// Large kernel attack surface, rarely needed by agent code.
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"name_to_handle_at", "open_by_handle_at", "fanotify_init",
	// Whole-machine state. (iopl, ioperm, uselib and _sysctl exist on
	// amd64 only.)
	"kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "reboot", "swapon", "swapoff", "acct",
	"quotactl", "quotactl_fd", "syslog", "settimeofday",
	"clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm",
	"vhangup", "uselib", "_sysctl", "lookup_dcookie",
}

// hostIPCSyscalls fail with EPERM in the landlock tier, which has no ipc
// namespace: System V shared memory, message queues and semaphores and
// POSIX message queues are the host's there, and a sandbox attached a
// 0666 segment the host made and read it
// (TestLandlockTierKeepsHostSysVIPCOut). An id is enough to attach
// (shmat needs no shmget), so every call that takes one is denied, not
// only the ones that look up a key. (POSIX shared memory and semaphores
// are files in /dev/shm, which Landlock keeps out.) Cost: programs that
// use System V IPC (PostgreSQL's shared memory, X11's MIT-SHM) fail there.
var hostIPCSyscalls = []string{
	"shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
	"semget", "semop", "semtimedop", "semctl",
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
}

// deniedOn counts the deniedSyscalls the architecture has.
func deniedOn(arch string) int {
	n := 0
	for _, name := range deniedSyscalls {
		if _, ok := syscallTables[arch].nr[name]; ok {
			n++
		}
	}
	return n
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

// seccompProgram builds the filter for the architecture arch (a GOARCH
// with a syscallTables entry: the numbers differ between architectures);
// sock says which sockets it allows; hostIPC denies hostIPCSyscalls.
func seccompProgram(arch string, sock socketRules, hostIPC bool) (bpfProg, error) {
	tab, ok := syscallTables[arch]
	if !ok {
		return nil, fmt.Errorf("isolate: no seccomp syscall table for %s (there are amd64 and arm64)", arch)
	}
	var p bpfProg
	// A foreign architecture's syscall numbers mean other syscalls (a
	// 32-bit binary on a 64-bit kernel): kill.
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, Jf: 0, K: tab.auditArch})
	p.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS)
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
	if tab.x32 {
		// x32 syscall numbers reach the same kernel entry points under
		// other numbers and would slip past the deny-list.
		p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 0, Jf: 1, K: x32ABI})
		p.stmt(unix.BPF_RET|unix.BPF_K, errnoRet(unix.EPERM))
	}
	denied := deniedSyscalls
	if hostIPC {
		denied = append(denied[:len(denied):len(denied)], hostIPCSyscalls...)
	}
	for _, name := range denied {
		if nr, ok := tab.nr[name]; ok {
			p.retIf(nr, errnoRet(unix.EPERM))
		}
	}
	sys := func(name string) uint32 {
		nr, ok := tab.nr[name]
		if !ok {
			panic("isolate: syscall table " + arch + " lacks " + name)
		}
		return nr
	}
	// clone3 passes its flags in memory that BPF cannot read: ENOSYS makes
	// libc and Go fall back to clone, whose flags are checked below.
	p.retIf(sys("clone3"), errnoRet(unix.ENOSYS))

	// The argument checks below load a new A, so each ends in a return.
	argCheck := func(nr uint32, build func(q *bpfProg)) {
		var q bpfProg
		build(&q)
		p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: uint8(len(q)), K: nr})
		p = append(p, q...)
	}
	argCheck(sys("clone"), func(q *bpfProg) {
		q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
		*q = append(*q, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: 0, Jf: 1, K: nsCloneFlags})
		q.stmt(unix.BPF_RET|unix.BPF_K, errnoRet(unix.EPERM))
		q.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
	})
	// TIOCSTI and TIOCLINUX push input into a terminal another process
	// reads from.
	argCheck(sys("ioctl"), func(q *bpfProg) {
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
		argCheck(sys("socket"), func(q *bpfProg) {
			q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
			q.retIf(unix.AF_UNIX, errnoRet(unix.EACCES))
			q.stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW)
		})
	case sock.unix:
		argCheck(sys("socket"), func(q *bpfProg) {
			q.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
			q.retIf(unix.AF_UNIX, unix.SECCOMP_RET_ALLOW)
			q.stmt(unix.BPF_RET|unix.BPF_K, errnoRet(unix.EACCES))
		})
	default:
		p.retIf(sys("socket"), errnoRet(unix.EACCES))
	}
	if !sock.unix {
		// Only pairs that are connected for good (see landlockTierSockets).
		argCheck(sys("socketpair"), func(q *bpfProg) {
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
