package kubernetes_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/kubernetes"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// The tests run against a real cluster: .ci/k8s/start.sh starts a
// single-node one on this machine and CI points SANDBOXKIT_K8S_KUBECONFIG
// at it. The tests never use $KUBECONFIG, so they cannot create pods on a
// cluster that happens to be configured. Without the variable they skip,
// unless SANDBOXKIT_REQUIRE names kubernetes.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go's HTTP/2 transport keeps idle connections whose
		// goroutines end when the server closes them, and klog flushes.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*http2ClientConn).readLoop"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// A kubeconfig with client certificate files makes client-go
		// watch them for rotation, for the life of the process.
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).run"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).runWorker"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntilWithContext.poller.func1.1"),
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntil"),
	)
}

const owner = "sandboxkit-k8s-test"

func kubeconfig() string { return os.Getenv("SANDBOXKIT_K8S_KUBECONFIG") }

func namespace() string {
	if s := os.Getenv("SANDBOXKIT_K8S_NAMESPACE"); s != "" {
		return s
	}
	return "sandboxkit-test"
}

func testImage() string {
	if s := os.Getenv("SANDBOXKIT_K8S_IMAGE"); s != "" {
		return s
	}
	return "sandboxkit/python:test"
}

// driverOptions are the options every test driver starts from.
func driverOptions(extra ...kubernetes.Option) []kubernetes.Option {
	return append([]kubernetes.Option{
		kubernetes.WithKubeconfig(kubeconfig(), ""),
		kubernetes.WithNamespace(namespace()),
		kubernetes.WithImage(testImage()),
		kubernetes.WithPullPolicy("Never"),
	}, extra...)
}

var (
	sharedOnce   sync.Once
	sharedDriver *kubernetes.Driver
	sharedErr    error
)

// testDriver returns the driver every public-API test shares, warmed up
// once: its first sandbox builds the agent (the race-enabled test binary is
// not static), which under a loaded CI machine can take minutes. Later
// sandboxes then cost what a user's do.
func testDriver(t testing.TB) *kubernetes.Driver {
	t.Helper()
	if kubeconfig() == "" {
		sandboxtest.Unavailable(t, "kubernetes", "SANDBOXKIT_K8S_KUBECONFIG is not set (start a cluster with .ci/k8s/start.sh and point it at the kubeconfig it prints)")
	}
	sharedOnce.Do(func() {
		sharedDriver = kubernetes.New(driverOptions()...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		sb, err := sandbox.New(ctx, sandbox.WithDriver(sharedDriver), sandbox.WithOwner(owner))
		if err != nil {
			sharedErr = err
			return
		}
		sharedErr = sb.Close()
	})
	if sharedErr != nil {
		if sandbox.CodeOf(sharedErr) == sandbox.CodeBackend {
			sandboxtest.Unavailable(t, "kubernetes", "no usable cluster: "+sharedErr.Error())
		}
		t.Fatalf("the first sandbox on the kubernetes backend: %v", sharedErr)
	}
	return sharedDriver
}

func newSandboxWith(t testing.TB, d *kubernetes.Driver, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.WithDriver(d), sandbox.WithOwner(owner)}, opts...)...)
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sb
}

func newSandbox(t testing.TB, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	return newSandboxWith(t, testDriver(t), opts...)
}

func control(info sandbox.Info, name string) (sandbox.Control, bool) {
	for _, c := range info.Controls {
		if c.Name == name {
			return c, true
		}
	}
	return sandbox.Control{}, false
}

func TestSandboxOnKubernetes(t *testing.T) {
	sb := newSandbox(t, sandbox.WithLimits(sandbox.Limits{CPUSeconds: 1, FileSizeBytes: 1 << 20, Pids: 100, MemoryBytes: 512 << 20}))
	ctx := context.Background()
	info := sb.Info()
	if info.Backend != "kubernetes" || info.Isolation != sandbox.TierContainer || info.Workspace != "/workspace" {
		t.Errorf("info = backend %s tier %s workspace %s, want kubernetes/container//workspace", info.Backend, info.Isolation, info.Workspace)
	}
	for _, name := range []string{"network", "privileges", "syscalls", "memory", "pids", "disk", "lifetime"} {
		if c, ok := control(info, name); !ok || !c.Enforced {
			t.Errorf("control %s = %+v, want enforced", name, c)
		}
	}
	sh := func(script string) []string { return []string{"sh", "-c", script} }
	uid := info.Extra["uid"]
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a command sees the workspace as its directory", sh("pwd"), 0, "/workspace"},
		{"it runs as the sandbox's own non-root uid", sh("id -u"), 0, uid},
		{"no capability is left", sh("grep CapEff /proc/self/status"), 0, "0000000000000000"},
		{"no privilege can be gained", sh("grep NoNewPrivs /proc/self/status"), 0, "1"},
		{"seccomp filters syscalls", sh("grep Seccomp: /proc/self/status"), 0, "2"},
		{"the root file system is read-only", sh("touch /etc/x 2>&1; echo $?"), 0, "Read-only file system"},
		{"no service account token is mounted", sh("ls /var/run/secrets/kubernetes.io 2>&1; echo done"), 0, "No such file"},
		{"no service variables leak in", sh("env | grep -c _SERVICE_HOST || true"), 0, "0"},
		{"python with numpy runs", []string{"python3", "-c", "import numpy; print(numpy.ones(3).sum())"}, 0, "3.0"},
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
	d := testDriver(t)
	sandboxtest.RunContract(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.WithDriver(d), sandbox.WithOwner(owner)}, opts...)...)
		if errors.Is(err, sandbox.ErrInvalidArgument) && strings.Contains(err.Error(), "host workspace") {
			// The suite's host-workspace tests skip backends without one;
			// a pod on a cluster node cannot mount this machine's
			// directory, and the backend refuses rather than ignores it.
			t.Skip("the kubernetes backend has no host workspace: " + err.Error())
		}
		if err != nil {
			t.Fatalf("sandbox.New: %v", err)
		}
		t.Cleanup(func() {
			if err := sb.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return sb
	})
}

// TestEscape runs the hostile probes of the escape suite inside pods: each
// must fail, and the host must be unchanged (the cluster runs on this
// machine, so the host's /proc sees the pods' processes after Close).
func TestEscape(t *testing.T) {
	sandboxtest.RunEscape(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, opts...)
	})
}

// TestNoClusterIsABackendError checks what a user of sandbox.New sees when
// the API server does not answer.
func TestNoClusterIsABackendError(t *testing.T) {
	d := kubernetes.New(kubernetes.WithKubeconfig(deadKubeconfig(t), ""))
	_, err := sandbox.New(context.Background(), sandbox.WithDriver(d))
	if !errors.Is(err, sandbox.ErrBackend) {
		t.Fatalf("New = %v, want %s", err, sandbox.CodeBackend)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("message %q does not name the API server", err)
	}
}

// deadKubeconfig writes a kubeconfig naming a port nothing listens on (the
// same as a cluster that is down).
func deadKubeconfig(t *testing.T) string {
	cfg := t.TempDir() + "/kubeconfig"
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(cfg, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}
