//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"io/fs"
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
	// file marks a rule on a non-directory, which may carry only
	// llFileOnly rights.
	file bool
	// host marks a path the builder can see (landlock tier): it is
	// skipped where the host lacks it, and file is decided by a stat.
	host bool
}

// landlockPolicy is what buildLandlock applies.
type landlockPolicy struct {
	abi   int
	rules []landlockRule
	// denyTCP handles TCP bind/connect with no rule (landlock tier
	// without network; the seccomp socket filter is the main wall).
	denyTCP bool
}

// buildLandlock adds the steps that create the ruleset and restrict the
// process to it; no_new_privs must be set before they run. A rule's path
// is opened by the program itself (the namespace tier's paths exist only
// after pivot_root); the builder decides which rules are on directories.
func buildLandlock(p *program, pol landlockPolicy) error {
	if pol.abi < 1 {
		return errors.New("isolate: Landlock is not available")
	}
	fsMask := handledFS(pol.abi)
	attr := &unix.LandlockRulesetAttr{Handled_access_fs: fsMask}
	if pol.denyTCP && pol.abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if pol.abi >= 6 {
		// No signals to processes outside the sandbox's domain, no
		// connecting to abstract unix sockets created outside it.
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	size := unsafe.Sizeof(*attr)
	if pol.abi < 6 {
		size = unsafe.Offsetof(attr.Scoped)
	}
	rs := p.slot()
	p.sys("landlock_create_ruleset", unix.SYS_LANDLOCK_CREATE_RULESET, addr(p, attr), size, 0).into(rs)
	for _, r := range pol.rules {
		if r.host {
			fi, err := os.Stat(r.path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("isolate: landlock rule for %s: %w", r.path, err)
			}
			r.file = !fi.IsDir()
		}
		access := r.access & fsMask
		if r.file {
			access &= llFileOnly
		}
		pb := &unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(r.fd)}
		p.keep = append(p.keep, pb)
		var s int
		if r.fd < 0 {
			s = p.slot()
			p.sys("open "+r.path+" for its Landlock rule", unix.SYS_OPENAT, atCWD, p.str(r.path), unix.O_PATH|unix.O_CLOEXEC).into(s)
			p.patchInt32(&pb.Parent_fd, s)
		}
		p.sys("landlock rule for "+r.path, unix.SYS_LANDLOCK_ADD_RULE, 0, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(pb)), 0).slotArg(0, rs)
		if r.fd < 0 {
			p.sys("close "+r.path, unix.SYS_CLOSE, 0).slotArg(0, s)
		}
	}
	p.sys("landlock_restrict_self", unix.SYS_LANDLOCK_RESTRICT_SELF, 0, 0).slotArg(0, rs)
	p.sys("close the Landlock ruleset", unix.SYS_CLOSE, 0).slotArg(0, rs)
	return nil
}
