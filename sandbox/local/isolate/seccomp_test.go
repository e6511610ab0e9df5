//go:build linux

package isolate

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyscallTables checks the per-architecture tables the filter is built
// from: the native one against golang.org/x/sys (both ways: no number
// wrong, no name forgotten), and every table for what the filter needs.
func TestSyscallTables(t *testing.T) {
	native, ok := syscallTables[runtime.GOARCH]
	if !ok {
		t.Fatalf("no syscall table for %s", runtime.GOARCH)
	}
	for name, want := range nativeSyscalls {
		if got, ok := native.nr[name]; !ok || got != want {
			t.Errorf("%s: table %s has %d (present %v), x/sys has %d", runtime.GOARCH, name, got, ok, want)
		}
	}
	for name := range native.nr {
		if _, ok := nativeSyscalls[name]; !ok {
			t.Errorf("%s: table has %s, which x/sys does not know on this architecture", runtime.GOARCH, name)
		}
	}
	for arch, tab := range syscallTables {
		seen := map[uint32]string{}
		for name, nr := range tab.nr {
			if other, dup := seen[nr]; dup {
				t.Errorf("%s: %s and %s both have number %d", arch, name, other, nr)
			}
			seen[nr] = name
		}
		for _, name := range append([]string{"clone", "clone3", "ioctl", "socket", "socketpair"}, hostIPCSyscalls...) {
			if _, ok := tab.nr[name]; !ok {
				t.Errorf("%s: the filter checks %s, which the table lacks", arch, name)
			}
		}
		if n := deniedOn(arch); n < len(deniedSyscalls)-4 {
			t.Errorf("%s: only %d of the %d denied syscalls are in the table", arch, n, len(deniedSyscalls))
		}
	}
	for _, name := range append(append([]string{}, deniedSyscalls...), hostIPCSyscalls...) {
		found := false
		for _, tab := range syscallTables {
			_, ok := tab.nr[name]
			found = found || ok
		}
		if !found {
			t.Errorf("denied syscall %s is in no table (a typo denies nothing)", name)
		}
	}
}

// runFilter interprets the classic BPF the filter uses (loads of
// seccomp_data words, jumps on constants, AND, returns) for one call.
func runFilter(t *testing.T, p bpfProg, arch, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			acc &= in.K
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var cond bool
			switch in.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JEQ:
				cond = acc == in.K
			case unix.BPF_JGE:
				cond = acc >= in.K
			case unix.BPF_JSET:
				cond = acc&in.K != 0
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		default:
			t.Fatalf("instruction %d: opcode %#x not interpreted", pc, in.Code)
		}
	}
	t.Fatal("the filter ran off its end")
	return 0
}

func retName(r uint32) string {
	switch {
	case r == unix.SECCOMP_RET_ALLOW:
		return "allow"
	case r == unix.SECCOMP_RET_KILL_PROCESS:
		return "kill"
	case r&0xffff0000 == unix.SECCOMP_RET_ERRNO:
		return unix.ErrnoName(unix.Errno(r & 0xffff))
	}
	return fmt.Sprintf("%#x", r)
}

// TestSeccompProgram runs the filter of each architecture, built here, on
// that architecture's numbers: what it denies, what it lets through, and
// the socket rules of each tier.
func TestSeccompProgram(t *testing.T) {
	landlockNoNet := landlockTierSockets(false, 7)
	for arch, tab := range syscallTables {
		t.Run(arch, func(t *testing.T) {
			p, err := seccompProgram(arch, landlockNoNet, true)
			if err != nil {
				t.Fatal(err)
			}
			a := tab.auditArch
			sys := func(name string) uint32 { return tab.nr[name] }
			for _, name := range append(append([]string{}, deniedSyscalls...), hostIPCSyscalls...) {
				if nr, ok := tab.nr[name]; ok {
					if got := retName(runFilter(t, p, a, nr)); got != "EPERM" {
						t.Errorf("%s: %s -> %s, want EPERM", arch, name, got)
					}
				}
			}
			const getpid = 39 // amd64; on arm64 39 is umount2, so use 172 there
			harmless := uint32(getpid)
			if arch == "arm64" {
				harmless = 172
			}
			cases := []struct {
				what string
				arch uint32
				nr   uint32
				args []uint64
				want string
			}{
				{"getpid", a, harmless, nil, "allow"},
				{"another architecture", 0x40000003 /* AUDIT_ARCH_I386 */, harmless, nil, "kill"},
				{"clone3", a, sys("clone3"), nil, "ENOSYS"},
				{"clone of a thread", a, sys("clone"), []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, "allow"},
				{"clone of a user namespace", a, sys("clone"), []uint64{unix.CLONE_NEWUSER}, "EPERM"},
				{"ioctl TIOCSTI", a, sys("ioctl"), []uint64{0, unix.TIOCSTI}, "EPERM"},
				{"ioctl TCGETS", a, sys("ioctl"), []uint64{0, unix.TCGETS}, "allow"},
				{"socket AF_INET", a, sys("socket"), []uint64{unix.AF_INET, unix.SOCK_STREAM}, "EACCES"},
				{"socket AF_UNIX (Landlock ABI 7)", a, sys("socket"), []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, "EACCES"},
				{"socketpair stream", a, sys("socketpair"), []uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, "allow"},
				{"socketpair seqpacket", a, sys("socketpair"), []uint64{unix.AF_UNIX, unix.SOCK_SEQPACKET}, "allow"},
				{"socketpair datagram", a, sys("socketpair"), []uint64{unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK}, "EACCES"},
			}
			if tab.x32 {
				cases = append(cases, struct {
					what string
					arch uint32
					nr   uint32
					args []uint64
					want string
				}{"an x32 number", a, x32ABI | sys("mount"), nil, "EPERM"})
			}
			for _, c := range cases {
				if got := retName(runFilter(t, p, c.arch, c.nr, c.args...)); got != c.want {
					t.Errorf("%s: %s -> %s, want %s", arch, c.what, got, c.want)
				}
			}
			// The other tiers' socket rules.
			for _, r := range []struct {
				rules      socketRules
				unix, inet string
			}{
				{allSockets, "allow", "allow"},
				{landlockTierSockets(true, 7), "EACCES", "allow"},
				{landlockTierSockets(false, 9), "allow", "EACCES"},
				{landlockTierSockets(true, 9), "allow", "allow"},
			} {
				q, err := seccompProgram(arch, r.rules, false)
				if err != nil {
					t.Fatal(err)
				}
				if got := retName(runFilter(t, q, a, sys("socket"), unix.AF_UNIX)); got != r.unix {
					t.Errorf("%s %+v: socket(AF_UNIX) -> %s, want %s", arch, r.rules, got, r.unix)
				}
				if got := retName(runFilter(t, q, a, sys("socket"), unix.AF_INET6)); got != r.inet {
					t.Errorf("%s %+v: socket(AF_INET6) -> %s, want %s", arch, r.rules, got, r.inet)
				}
				// Only the landlock tier (hostIPC) refuses IPC calls.
				if got := retName(runFilter(t, q, a, sys("shmat"))); got != "allow" {
					t.Errorf("%s without hostIPC: shmat -> %s", arch, got)
				}
			}
		})
	}
	if _, err := seccompProgram("riscv64", allSockets, false); err == nil {
		t.Error("a filter was built for an architecture without a table")
	}
}
