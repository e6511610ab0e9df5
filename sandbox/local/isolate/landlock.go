package isolate

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// landlockABI returns the kernel's Landlock ABI version, 0 when Landlock is
// unavailable (not built, not enabled at boot).
func landlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// Filesystem access rights, grouped by what the sandbox needs.
const (
	llRead  = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	llExec  = unix.LANDLOCK_ACCESS_FS_EXECUTE
	llWrite = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM | unix.LANDLOCK_ACCESS_FS_REFER |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	llAll = llRead | llExec | llWrite | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	// llFileOnly are the rights a rule on a non-directory may carry.
	llFileOnly = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// handledFS is the set of filesystem rights the kernel of the given ABI
// knows; everything in it is denied unless a rule allows it.
func handledFS(abi int) uint64 {
	m := uint64(1<<13 - 1) // ABI 1: EXECUTE .. MAKE_SYM
	if abi >= 2 {
		m |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		m |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		m |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 9 {
		// connect() to pathname unix sockets (docker.sock, D-Bus).
		m |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	return m
}

// landlockRule is one path and the rights granted beneath it.
type landlockRule struct {
	path   string
	fd     int // used instead of path when >= 0
	access uint64
}

// landlockPolicy is what restrictLandlock applies.
type landlockPolicy struct {
	abi   int
	rules []landlockRule
	// denyTCP handles TCP bind/connect with no rule (landlock tier
	// without network; the seccomp socket filter is the main wall).
	denyTCP bool
}

// restrictLandlock creates the ruleset and restricts the calling thread.
// no_new_privs must be set. Paths that do not exist are skipped (a
// read-only path the host lacks).
func restrictLandlock(pol landlockPolicy) error {
	if pol.abi < 1 {
		return errors.New("isolate: Landlock is not available")
	}
	fsMask := handledFS(pol.abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fsMask}
	if pol.denyTCP && pol.abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if pol.abi >= 6 {
		// No signals to processes outside the sandbox's domain, no
		// connecting to abstract unix sockets created outside it.
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	size := unsafe.Sizeof(attr)
	if pol.abi < 6 {
		size = unsafe.Offsetof(attr.Scoped)
	}
	rfd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return fmt.Errorf("isolate: landlock_create_ruleset: %w", e)
	}
	defer unix.Close(int(rfd))
	for _, r := range pol.rules {
		fd := r.fd
		if fd < 0 {
			var err error
			fd, err = unix.Open(r.path, unix.O_PATH|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return fmt.Errorf("isolate: landlock rule for %s: %w", r.path, err)
			}
			defer unix.Close(fd)
		}
		access := r.access & fsMask
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("isolate: landlock rule for %s: %w", r.path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= llFileOnly
		}
		pb := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
		_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, rfd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
		if e != 0 {
			return fmt.Errorf("isolate: landlock rule for %s: %w", r.path, e)
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, rfd, 0, 0); e != 0 {
		return fmt.Errorf("isolate: landlock_restrict_self: %w", e)
	}
	return nil
}

// exeRule lets the restricted thread execute (and the agent re-read) the
// program's own binary, which lies outside every other rule.
func exeRule() (landlockRule, error) {
	fd, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return landlockRule{}, fmt.Errorf("isolate: open /proc/self/exe: %w", err)
	}
	return landlockRule{path: os.Args[0], fd: fd, access: llExec | unix.LANDLOCK_ACCESS_FS_READ_FILE}, nil
}
