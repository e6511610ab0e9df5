package kubernetes

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"github.com/sandboxkit/sandboxkit/internal/agentbuild"
	"os"
	"runtime"
	"sync"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// agentEnv names a static agent binary to use when no option gives one.
const agentEnv = "SANDBOXKIT_AGENT"

// agentPkg is the standalone agent's import path, built when no binary is
// at hand.
const agentPkg = agentbuild.Pkg

// agentBin is an agent binary ready to be streamed into a pod.
type agentBin struct {
	data   []byte
	arch   string // GOARCH it runs on; pods are pinned to nodes of this arch
	sum    string // hex sha256, for Info
	source string // where it came from, for Info
}

// agentCache keeps each binary read, keyed by path, size and modification
// time.
var agentCache struct {
	mu   sync.Mutex
	bins map[string]*agentBin
}

// elfArch maps an ELF machine to the GOARCH (and kubernetes.io/arch label)
// of its binaries.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_PPC64:   "ppc64le",
	elf.EM_S390:    "s390x",
	elf.EM_RISCV:   "riscv64",
}

// staticELFArch returns the GOARCH of a static Linux ELF executable, or why
// path cannot run as the agent in an arbitrary image (a dynamically linked
// binary needs the image's libc).
func staticELFArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s is not a Linux ELF binary: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("%s is built for %v, which no Kubernetes node label names", path, f.Machine)
	}
	return arch, nil
}

// findAgent returns the agent binary: the path given by WithAgentBinary or
// the "agent" option, else $SANDBOXKIT_AGENT, else a build of
// cmd/sandboxkit-agent for this machine's architecture (once per process,
// into the user cache directory; needs a Go toolchain).
func findAgent(ctx context.Context, explicit string) (*agentBin, error) {
	for _, c := range []struct{ path, from string }{{explicit, "kubernetes agent option"}, {os.Getenv(agentEnv), "$" + agentEnv}} {
		if c.path == "" {
			continue
		}
		if _, err := staticELFArch(c.path); err != nil {
			return nil, driver.Errorf(driver.CodeInvalidArgument, err, fmt.Sprintf(
				"the agent binary from %s cannot run in a pod; build one with `CGO_ENABLED=0 GOOS=linux GOARCH=<node arch> go build %s`",
				c.from, agentPkg))
		}
		return readAgent(c.path, c.from)
	}
	built, err := buildAgent(ctx, runtime.GOARCH)
	if err != nil {
		return nil, driver.Errorf(driver.CodeIsolationUnavailable, err, fmt.Sprintf(
			"no agent binary for the pods: building %s failed; pass kubernetes.WithAgentBinary or set $%s to a static agent built with `CGO_ENABLED=0 GOOS=linux GOARCH=<node arch> go build %s`",
			agentPkg, agentEnv, agentPkg))
	}
	return readAgent(built, "built "+agentPkg)
}

func readAgent(path, source string) (*agentBin, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, driver.Errorf(driver.CodeInvalidArgument, err, "cannot read the agent binary")
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	agentCache.mu.Lock()
	defer agentCache.mu.Unlock()
	if a, ok := agentCache.bins[key]; ok {
		return &agentBin{data: a.data, arch: a.arch, sum: a.sum, source: source}, nil
	}
	arch, err := staticELFArch(path)
	if err != nil {
		return nil, driver.Errorf(driver.CodeInvalidArgument, err, "the agent binary cannot run in a pod")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, driver.Errorf(driver.CodeInvalidArgument, err, "cannot read the agent binary")
	}
	sum := sha256.Sum256(data)
	a := &agentBin{data: data, arch: arch, sum: hex.EncodeToString(sum[:]), source: source}
	if agentCache.bins == nil {
		agentCache.bins = map[string]*agentBin{}
	}
	agentCache.bins[key] = a
	return a, nil
}

// buildAgent builds the standalone agent for linux/goarch once per process
// (internal/agentbuild, shared with the Docker backend). A cold build of the
// agent can take longer than a pod start, hence the longer bound.
func buildAgent(ctx context.Context, goarch string) (string, error) {
	return agentbuild.Build(ctx, goarch, 10*driver.DefaultStartTimeout)
}
