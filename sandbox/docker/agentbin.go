package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"github.com/sandboxkit/sandboxkit/internal/agentbuild"
	"os"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// agentEnv names a static agent binary to use when no option gives one.
const agentEnv = "SANDBOXKIT_AGENT"

// agentPkg is the standalone agent's import path, built when no binary is
// at hand.
const agentPkg = agentbuild.Pkg

// agentBin is an agent ready to be copied into a container.
type agentBin struct {
	tar    []byte   // a tar stream holding one file, "agent"
	size   int64    // the binary's size
	sum    string   // hex sha256 of the binary, names its volume
	args   []string // the container's entrypoint
	source string   // where it came from, for Isolation().Extra
}

// agentCache keeps the tar of each binary used, keyed by path, size and
// modification time, so that a sandbox start costs one CopyToContainer and
// no file read.
// There is one per process (agents), shared by every Driver.
type agentCache struct {
	mu   sync.Mutex
	tars map[string]*agentBin
}

var agents agentCache

// elfMachines maps GOARCH to the ELF machine of its binaries.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// checkStaticELF reports why path cannot run as the agent on a Linux engine
// of arch goarch: it must be an ELF executable for that machine with no
// program interpreter (a dynamically linked binary needs the image's libc).
func checkStaticELF(path, goarch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not a Linux ELF binary: %w", path, err)
	}
	defer f.Close()
	if want, ok := elfMachines[goarch]; !ok || f.Machine != want {
		return fmt.Errorf("%s is built for %v, the engine runs %s", path, f.Machine, goarch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// agentFor finds the agent binary for an engine of arch goarch, in the order
// the package doc describes.
func findAgent(ctx context.Context, explicit, goarch string) (*agentBin, error) {
	fail := func(err error, msg string) error {
		return driver.Errorf(driver.CodeIsolationUnavailable, err, msg)
	}
	for _, c := range []struct{ path, from string }{{explicit, "docker agent option"}, {os.Getenv(agentEnv), "$" + agentEnv}} {
		if c.path == "" {
			continue
		}
		if err := checkStaticELF(c.path, goarch); err != nil {
			return nil, driver.Errorf(driver.CodeInvalidArgument, err, fmt.Sprintf(
				"the agent binary from %s cannot run in the container; build one with `CGO_ENABLED=0 GOOS=linux GOARCH=%s go build %s`",
				c.from, goarch, agentPkg))
		}
		return agentFromFile(c.path, []string{agentPath}, c.from)
	}
	if self, err := os.Executable(); err == nil && checkStaticELF(self, goarch) == nil {
		return agentFromFile(self, []string{agentPath, hookArg}, "running program")
	}
	built, err := buildAgent(ctx, goarch)
	if err != nil {
		return nil, fail(err, fmt.Sprintf(
			"no agent binary for a linux/%s engine: this program is not a static linux/%s binary and building %s failed; "+
				"build your program with CGO_ENABLED=0, or pass docker.WithAgentBinary / set $%s to a static agent built with `CGO_ENABLED=0 GOOS=linux GOARCH=%s go build %s`",
			goarch, goarch, agentPkg, agentEnv, goarch, agentPkg))
	}
	return agentFromFile(built, []string{agentPath}, "built "+agentPkg)
}

// agentFromFile returns the cached tar of path, reading it on first use or
// when the file changed.
func agentFromFile(path string, args []string, source string) (*agentBin, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, driver.Errorf(driver.CodeInvalidArgument, err, "cannot read the agent binary")
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	agents.mu.Lock()
	defer agents.mu.Unlock()
	if a, ok := agents.tars[key]; ok {
		return &agentBin{tar: a.tar, size: a.size, sum: a.sum, args: args, source: source}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, driver.Errorf(driver.CodeInvalidArgument, err, "cannot read the agent binary")
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// Owned by root and not writable, so the unprivileged sandbox user
	// cannot replace the binary that serves it.
	hdr := &tar.Header{Name: "agent", Mode: 0o555, Size: int64(len(data)), Uid: 0, Gid: 0,
		ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if agents.tars == nil {
		agents.tars = map[string]*agentBin{}
	}
	// Only the newest version of a path is worth keeping.
	for k := range agents.tars {
		if len(k) > len(path) && k[:len(path)+1] == path+"\x00" {
			delete(agents.tars, k)
		}
	}
	sum := sha256.Sum256(data)
	a := &agentBin{tar: buf.Bytes(), size: int64(len(data)), sum: hex.EncodeToString(sum[:]), args: args, source: source}
	agents.tars[key] = a
	return a, nil
}

// buildAgent builds the standalone agent for linux/goarch once per process
// (internal/agentbuild, shared with the Kubernetes backend).
func buildAgent(ctx context.Context, goarch string) (string, error) {
	return agentbuild.Build(ctx, goarch, driver.DefaultStartTimeout)
}
