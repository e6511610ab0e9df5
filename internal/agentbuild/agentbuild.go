// Package agentbuild builds the standalone sandboxkit agent
// (cmd/sandboxkit-agent) for a Linux architecture, for the backends that
// bring the agent into a container or pod (sandbox/docker,
// sandbox/kubernetes) when the program cannot serve as its own agent. One
// build per architecture per process, into the user's cache directory,
// shared by the backends: the binary is the same for both.
package agentbuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// Pkg is the standalone agent's import path.
const Pkg = "github.com/sandboxkit/sandboxkit/cmd/sandboxkit-agent"

type result struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*result{}
)

// Build returns the path of the agent built with CGO_ENABLED=0 for
// linux/goarch, building it on the first call for that architecture. The
// build runs under its own deadline (timeout), detached from ctx's
// cancellation: it is shared by every later caller, so one caller giving
// up must not poison it. It builds from this module's source tree when
// that is on disk (a checkout or the module cache), else from the current
// module, which must then require sandboxkit.
func Build(ctx context.Context, goarch string, timeout time.Duration) (string, error) {
	mu.Lock()
	b := builds[goarch]
	if b == nil {
		b = &result{}
		builds[goarch] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		b.path, b.err = build(bctx, goarch)
	})
	return b.path, b.err
}

func build(ctx context.Context, goarch string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("no go toolchain on PATH")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sandboxkit", "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "sandboxkit-agent-linux-"+goarch)
	// Build to a temporary name and rename, so that a concurrent process
	// never reads a half-written binary.
	tmp, err := os.CreateTemp(dir, ".build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.CommandContext(ctx, gobin, "build", "-trimpath", "-o", tmp.Name(), Pkg)
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if _, err := os.Stat(filepath.Join(root, "cmd", "sandboxkit-agent")); err == nil {
			cmd.Dir = root
		}
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if outb, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", Pkg, err, bytes.TrimSpace(outb))
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}
