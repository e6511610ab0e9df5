package docker

import (
	_ "embed"
	"errors"
	"strings"
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
//
// The profile is generated into seccomp_profile.json rather than computed
// at run time because moby/profiles builds its default only on Linux, and
// the Docker backend also runs from macOS and Windows hosts, whose engines
// run Linux containers all the same. TestSeccompProfileFileIsCurrent
// (Linux) regenerates it and fails when the file is stale; run it with
// -update-seccomp to rewrite the file.
func seccompProfile() (string, error) {
	if len(seccompProfileJSON) == 0 {
		return "", errors.New("docker: the embedded seccomp profile is empty; regenerate seccomp_profile.json")
	}
	return seccompProfileJSON, nil
}

//go:embed seccomp_profile.json
var seccompProfileJSON string

// seccompMechanism describes the profile for Info().
func seccompMechanism() string {
	return "seccomp: Docker's default allowlist without " + strings.Join(deniedSyscalls, ", ")
}
