package docker

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/moby/profiles/seccomp"
)

// deniedSyscalls are removed from Docker's default seccomp allowlist for
// sandbox containers. The default profile leaves them to capabilities or
// kernel versions, and older engines (20.10, Debian's) allow all of them to
// any container:
//   - ptrace and process_vm_readv/writev: reading and steering another
//     process of the sandbox user, including the agent that serves the
//     sandbox (a traced agent could be made to lie to the host);
//   - io_uring_*: an interface with a long record of kernel privilege
//     escalations, and one that bypasses per-syscall filtering.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// seccompProfile is the JSON of the profile every sandbox container runs
// under: the default allowlist of the moby/profiles release this module
// builds with (the same list the engine applies by default, possibly
// newer), without deniedSyscalls. Sending it, rather than relying on the
// engine's own default, also makes the policy independent of the engine's
// version. Anything not allowed fails with EPERM (clone3 with ENOSYS, so
// that libc falls back to clone, whose flags the profile can check).
var seccompProfile = sync.OnceValues(func() (string, error) {
	p := seccomp.DefaultProfile()
	for _, sc := range p.Syscalls {
		sc.Names = slices.DeleteFunc(sc.Names, func(n string) bool { return slices.Contains(deniedSyscalls, n) })
	}
	p.Syscalls = slices.DeleteFunc(p.Syscalls, func(sc *seccomp.Syscall) bool { return len(sc.Names) == 0 && sc.Name == "" })
	b, err := json.Marshal(p)
	return string(b), err
})

// seccompMechanism describes the profile for Info().
func seccompMechanism() string {
	return "seccomp: Docker's default allowlist without " + strings.Join(deniedSyscalls, ", ")
}
