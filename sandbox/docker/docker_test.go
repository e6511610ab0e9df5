package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// The tests run against a real engine and a locally built image (no
// registry): .ci/docker/start-engine.sh and .ci/docker/build-image.sh.
// Without an engine they skip, unless SANDBOXKIT_REQUIRE names docker.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The engine client's HTTP transport keeps idle keep-alive
		// connections whose goroutines end when the server closes them.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// testImage is the local image the tests run (built by build-image.sh).
func testImage() string {
	if s := os.Getenv("SANDBOXKIT_DOCKER_IMAGE"); s != "" {
		return s
	}
	return "sandboxkit/python:test"
}

func required() bool { return sandboxtest.Required("docker") }

// skipOrFail skips the test with reason, or fails it when docker is required.
func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	sandboxtest.Unavailable(t, "docker", reason)
}

var (
	engineOnce sync.Once
	engineErr  error
)

// needEngine skips (or fails) when no engine or test image is reachable.
func needEngine(t testing.TB) {
	t.Helper()
	engineOnce.Do(func() {
		d := New(WithPull(PullNever))
		defer d.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f, err := d.facts(ctx)
		if err != nil {
			engineErr = err
			return
		}
		if _, err := d.cli.ImageInspect(ctx, testImage()); err != nil {
			engineErr = errors.New("test image " + testImage() + " missing: run .ci/docker/build-image.sh")
			return
		}
		// Build the agent now, once per test binary and with a deadline
		// of its own (the race-enabled test binary is not static, so the
		// agent is built with the go tool): a test's deadline then guards
		// against hangs, not against this one-time build.
		bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer bcancel()
		if _, err := findAgent(bctx, "", f.arch); err != nil {
			engineErr = err
		}
	})
	if engineErr != nil {
		skipOrFail(t, "no usable Docker engine: "+engineErr.Error())
	}
}

// newTestDriver returns a driver for the test image that never pulls.
func newTestDriver(t testing.TB, opts ...Option) *Driver {
	t.Helper()
	needEngine(t)
	d := New(append([]Option{WithImage(testImage()), WithPull(PullNever)}, opts...)...)
	t.Cleanup(func() { d.Close() })
	return d
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// started is a container with a connected agent client.
type started struct {
	c  *Container
	cl *agent.Client
}

func start(t testing.TB, d *Driver, cfg driver.Config) *started {
	t.Helper()
	ctx := testCtx(t)
	if cfg.Owner == "" {
		cfg.Owner = "sandboxkit-docker-test"
	}
	inst, err := d.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c := inst.(*Container)
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	cl, err := agent.Dial(ctx, c.Conn(), wire.Hello{
		Workspace: c.Isolation().WorkspacePath,
		Env:       []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"},
	})
	if err != nil {
		t.Fatalf("agent handshake: %v (agent stderr: %s)", err, c.conn.stderrTail())
	}
	t.Cleanup(func() { cl.Close() })
	return &started{c: c, cl: cl}
}

// run executes args in the sandbox and returns stdout+stderr and the exit code.
func (s *started) run(t testing.TB, args ...string) (string, int) {
	t.Helper()
	out, code, err := s.exec(testCtx(t), args...)
	if err != nil {
		t.Fatalf("exec %q: %v", args, err)
	}
	return out, code
}

func (s *started) exec(ctx context.Context, args ...string) (string, int, error) {
	var mu sync.Mutex
	var buf bytes.Buffer
	call, err := s.cl.Start("exec", wire.ExecRequest{Args: args, TimeoutMs: 30000}, agent.Handlers{
		OnData: func(_ wire.FrameType, b []byte) { mu.Lock(); buf.Write(b); mu.Unlock() },
	})
	if err != nil {
		return "", -1, err
	}
	raw, err := call.WaitContext(ctx)
	if err != nil {
		return "", -1, err
	}
	var rep wire.ExecReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return "", -1, err
	}
	mu.Lock()
	defer mu.Unlock()
	return buf.String(), rep.ExitCode, nil
}

// inspectGone reports whether the engine no longer knows the container.
func inspectGone(t *testing.T, d *Driver, id string) bool {
	t.Helper()
	_, err := d.cli.ContainerInspect(context.Background(), id)
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "no such container")
}

// randID makes sandbox ids unique across test runs on one engine.
func randID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// dropAgentVolume removes, at the end of t, the agent volume of a binary
// built only for t, so test runs do not pile up volumes on the engine.
func dropAgentVolume(t *testing.T, d *Driver, bin string) {
	t.Helper()
	t.Cleanup(func() {
		data, err := os.ReadFile(bin)
		if err != nil {
			return
		}
		sum := sha256.Sum256(data)
		_ = d.cli.VolumeRemove(context.Background(), "sandboxkit-agent-"+hex.EncodeToString(sum[:])[:16], false)
	})
}
