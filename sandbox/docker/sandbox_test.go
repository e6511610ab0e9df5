package docker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/docker"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// These tests drive the backend through the public API, as a user does.

func testImage() string {
	if s := os.Getenv("SANDBOXKIT_DOCKER_IMAGE"); s != "" {
		return s
	}
	return "sandboxkit/python:test"
}

var (
	sharedOnce   sync.Once
	sharedDriver *docker.Driver
	sharedErr    error
)

// testDriver returns the driver every public-API test shares, warmed up
// once: its first sandbox builds the agent (the race-enabled test binary
// is not static, so it cannot serve as its own agent) and fills the agent
// volume, which under a loaded CI machine can take minutes. Later
// sandboxes then cost what a user's do, and a test's deadline guards
// against hangs rather than against that one-time build.
func testDriver(t testing.TB) *docker.Driver {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDriver = docker.New(docker.WithImage(testImage()), docker.WithPull(docker.PullNever))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		sb, err := sandbox.New(ctx, sandbox.WithDriver(sharedDriver), sandbox.WithOwner("sandboxkit-docker-test"))
		if err != nil {
			sharedErr = err
			return
		}
		sharedErr = sb.Close()
	})
	if sharedErr != nil {
		// A stopped engine is SBX_BACKEND, a missing image SBX_NOT_FOUND:
		// this machine cannot run the suite. Anything else is a bug.
		if c := sandbox.CodeOf(sharedErr); c == sandbox.CodeBackend || c == sandbox.CodeNotFound {
			if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "docker") {
				t.Fatalf("SANDBOXKIT_REQUIRE contains docker, but: %v", sharedErr)
			}
			t.Skipf("no usable Docker engine or test image (run .ci/docker/start-engine.sh and build-image.sh): %v", sharedErr)
		}
		t.Fatalf("the first sandbox on the docker backend: %v", sharedErr)
	}
	return sharedDriver
}

// newSandbox creates a sandbox on the docker backend with the test image,
// skipping (or failing, when SANDBOXKIT_REQUIRE names docker) without an
// engine or the image.
func newSandbox(t testing.TB, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	d := testDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-test")}, opts...)...)
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

func TestSandboxOnDocker(t *testing.T) {
	sb := newSandbox(t, sandbox.WithLimits(sandbox.Limits{CPUSeconds: 1, FileSizeBytes: 1 << 20}))
	ctx := context.Background()
	info := sb.Info()
	if info.Backend != "docker" || info.Isolation != sandbox.TierContainer || info.Workspace != "/workspace" {
		t.Errorf("info = backend %s tier %s workspace %s, want docker/container//workspace", info.Backend, info.Isolation, info.Workspace)
	}
	sh := func(script string) []string { return []string{"sh", "-c", script} }
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a command sees the workspace as its directory", sh("pwd"), 0, "/workspace"},
		{"the host environment does not leak in", sh("env | grep -c DOCKER_HOST || true"), 0, "0"},
		{"python with numpy runs", []string{"python3", "-c", "import numpy; print(numpy.ones(3).sum())"}, 0, "3.0"},
		// The agent applies these per process; the backend's controls
		// name them as rlimits the agent sets (SetByAgent). Args, not a shell, so the limited process
		// is the one the agent started.
		{"the CPU-time limit stops a busy loop", []string{"python3", "-c", "while True: pass"}, -1, ""},
		{"the file-size limit stops a big write", []string{"python3", "-c", "open('big', 'wb').write(bytes(4 << 20))"}, 1, "File too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := sb.Commands.Run(ctx, sandbox.Command{Args: tt.args, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			out := res.Stdout + res.Stderr
			killed := tt.code == -1 && res.Signal != "" && !res.TimedOut
			if !killed && res.ExitCode != tt.code || !strings.Contains(out, tt.want) {
				t.Fatalf("%q: exit %d signal %q output %q; want exit %d containing %q", tt.args, res.ExitCode, res.Signal, out, tt.code, tt.want)
			}
		})
	}
	if err := sb.Files.Write(ctx, "hello.txt", []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.Files.ReadFile(ctx, "hello.txt"); err != nil || string(b) != "hi" {
		t.Fatalf("read back %q, %v", b, err)
	}
}

// TestContract runs the contract suite every backend passes.
func TestContract(t *testing.T) {
	sandboxtest.RunContract(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, opts...)
	})
}

// TestEscape runs the hostile probes of the escape suite inside docker
// sandboxes: each must fail, and the host must be unchanged.
func TestEscape(t *testing.T) {
	sandboxtest.RunEscape(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, opts...)
	})
}

// A sandbox that dies takes its cause to the caller: a command cut short
// by the death, and every later call, say what killed the container
// rather than only that its agent is gone.
func TestDeathCauseReachesTheCaller(t *testing.T) {
	sb := newSandbox(t)
	id := sb.Info().Extra["container_id"]
	d := testDriver(t)
	cli, err := d.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, err := sb.Commands.Start(ctx, sandbox.Command{Shell: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	run := make(chan error, 1)
	go func() {
		_, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "sleep 60"})
		run <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := cli.ContainerKill(ctx, id, "KILL"); err != nil {
		t.Fatal(err)
	}
	const want = "killed through the Docker engine"
	if err := <-run; !errors.Is(err, sandbox.ErrDead) || !strings.Contains(err.Error(), want) {
		t.Errorf("the command in flight got %v; want %s naming the cause (%q)", err, sandbox.CodeDead, want)
	}
	if _, err := job.Wait(ctx); !errors.Is(err, sandbox.ErrDead) || !strings.Contains(err.Error(), want) {
		t.Errorf("the background job got %v; want %s naming the cause", err, sandbox.CodeDead)
	}
	_, err = sb.Files.Read(ctx, "x", sandbox.ReadOptions{})
	if !errors.Is(err, sandbox.ErrDead) || !strings.Contains(err.Error(), want) {
		t.Errorf("a later call got %v; want %s naming the cause", err, sandbox.CodeDead)
	}
	t.Logf("after the kill: %v", err)
}

// TestEngineErrorsThroughThePublicAPI checks what a user of sandbox.New
// sees when the engine is stopped or the image is missing: a coded error
// to branch on, with a message that says what to do.
func TestEngineErrorsThroughThePublicAPI(t *testing.T) {
	t.Run("a stopped engine is SBX_BACKEND and says how to start one", func(t *testing.T) {
		// No engine answers on this socket: the same as a stopped dockerd.
		d := docker.New(docker.WithHost("unix://"+t.TempDir()+"/docker.sock"), docker.WithImage(testImage()))
		defer d.Close()
		_, err := sandbox.New(context.Background(), sandbox.WithDriver(d))
		if !errors.Is(err, sandbox.ErrBackend) {
			t.Fatalf("New = %v, want %s", err, sandbox.CodeBackend)
		}
		for _, want := range []string{"cannot reach the Docker engine", "start it", "DOCKER_HOST"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
	t.Run("a missing image is SBX_NOT_FOUND and says how to get it", func(t *testing.T) {
		testDriver(t) // needs the engine
		image := "sandboxkit/absent:" + strconv.Itoa(rand.IntN(1e9))
		d := docker.New(docker.WithImage(image), docker.WithPull(docker.PullNever))
		defer d.Close()
		_, err := sandbox.New(context.Background(), sandbox.WithDriver(d))
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("New = %v, want %s", err, sandbox.CodeNotFound)
		}
		for _, want := range []string{image, "docker build / docker load / docker import", "allow pulls"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
}

// TestSuitesUnderRunsc runs the contract and escape suites in gVisor
// sandboxes (runsc), for every control Info reports there. The backend
// measures runsc when it first makes a sandbox on it and refuses the
// runtime, naming the probe, when a control does not hold: then there is
// no sandbox whose report could be wrong, and the refusal is the result.
func TestSuitesUnderRunsc(t *testing.T) {
	needs := testDriver(t) // the engine and the image
	cli, err := needs.Client()
	if err != nil {
		t.Fatal(err)
	}
	info, err := cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Runtimes["runsc"]; !ok {
		sandboxtest.Unavailable(t, "gvisor", "the engine has no runsc runtime (.ci/docker/start-engine.sh registers Debian's)")
	}
	d := docker.New(docker.WithImage(testImage()), docker.WithPull(docker.PullNever), docker.WithRuntime("runsc"))
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-test"))
	if err != nil {
		if !errors.Is(err, sandbox.ErrIsolationUnavailable) || !strings.Contains(err.Error(), "creation-time check, probe ") {
			t.Fatalf("sandbox.New on runsc = %v; want a sandbox, or %s naming the probe that failed", err, sandbox.CodeIsolationUnavailable)
		}
		t.Logf("runsc is refused, as measured; no sandbox to run the suites in: %v", err)
		return
	}
	sb.Close()
	newRunsc := func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-test")}, opts...)...)
		if err != nil {
			t.Fatalf("sandbox.New on runsc: %v", err)
		}
		t.Cleanup(func() { sb.Close() })
		if sb.Info().Isolation != sandbox.TierGVisor {
			t.Fatalf("a runsc sandbox reports tier %s", sb.Info().Isolation)
		}
		return sb
	}
	t.Run("Contract", func(t *testing.T) { sandboxtest.RunContract(t, newRunsc) })
	t.Run("Escape", func(t *testing.T) { sandboxtest.RunEscape(t, newRunsc) })
}
