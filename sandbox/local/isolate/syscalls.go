//go:build linux

package isolate

// syscallTable is one architecture's numbers for the system calls the
// seccomp filter names (deniedSyscalls, hostIPCSyscalls, and clone,
// clone3, ioctl, socket and socketpair, whose arguments it checks). The numbers are data, not
// golang.org/x/sys/unix constants, so that every architecture's filter can
// be built and checked on any one (TestSyscallTables compares the native
// table with x/sys; TestSeccompProgram runs both filters in a BPF
// interpreter). A name missing from a table is a system call the
// architecture does not have.
type syscallTable struct {
	// auditArch is the AUDIT_ARCH_* value of seccomp_data.arch.
	auditArch uint32
	// x32 says the kernel also takes x32 numbers (nr | x32ABI), which
	// reach the same entry points (amd64).
	x32 bool
	nr  map[string]uint32
}

// x32ABI marks x32 syscall numbers.
const x32ABI = 0x40000000

// syscallTables by GOARCH: amd64 from Linux's
// arch/x86/entry/syscalls/syscall_64.tbl, arm64 from the generic
// include/uapi/asm-generic/unistd.h.
var syscallTables = map[string]syscallTable{
	"amd64": {auditArch: 0xc000003e, x32: true, nr: map[string]uint32{ // AUDIT_ARCH_X86_64
		"mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428,
		"open_tree_attr": 467, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
		"fspick": 433, "mount_setattr": 442, "unshare": 272, "setns": 308, "ptrace": 101,
		"process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "bpf": 321,
		"perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
		"io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249,
		"name_to_handle_at": 303, "open_by_handle_at": 304, "fanotify_init": 300, "kexec_load": 246,
		"kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
		"reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179, "quotactl_fd": 443,
		"syslog": 103, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
		"iopl": 172, "ioperm": 173, "vhangup": 153, "uselib": 134, "_sysctl": 156, "lookup_dcookie": 212,
		"clone": 56, "clone3": 435, "ioctl": 16, "socket": 41, "socketpair": 53,
		"shmget": 29, "shmat": 30, "shmctl": 31, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
		"semget": 64, "semop": 65, "semtimedop": 220, "semctl": 66, "mq_open": 240, "mq_unlink": 241,
		"mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
	}},
	"arm64": {auditArch: 0xc00000b7, x32: false, nr: map[string]uint32{ // AUDIT_ARCH_AARCH64
		"mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428,
		"open_tree_attr": 467, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
		"fspick": 433, "mount_setattr": 442, "unshare": 97, "setns": 268, "ptrace": 117,
		"process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "bpf": 280,
		"perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
		"io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218,
		"name_to_handle_at": 264, "open_by_handle_at": 265, "fanotify_init": 262, "kexec_load": 104,
		"kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
		"reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "quotactl": 60, "quotactl_fd": 443,
		"syslog": 116, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
		"vhangup": 58, "lookup_dcookie": 18, "clone": 220, "clone3": 435, "ioctl": 29, "socket": 198,
		"socketpair": 199,
		"shmget":     194, "shmat": 196, "shmctl": 195, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
		"semget": 190, "semop": 193, "semtimedop": 192, "semctl": 191, "mq_open": 180, "mq_unlink": 181,
		"mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185,
	}},
}
