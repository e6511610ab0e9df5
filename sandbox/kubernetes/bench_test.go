package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// The benchmarks compare the public API against floors in the same run
// (sandboxtest.CompareWithFloors alternates them, so all see the same
// machine):
//
//	go test ./sandbox/kubernetes -run '^$' -bench . -benchtime 20x
//
// x-kubectl-exec is the target: a warm command must cost at most a
// tenth of `kubectl exec POD -- true` (x-kubectl-exec <= 0.1).

// kubectl finds the kubectl binary: $SANDBOXKIT_K8S_KUBECTL, the one
// .ci/k8s/build.sh built, or PATH.
func kubectl(b *testing.B) string {
	if s := os.Getenv("SANDBOXKIT_K8S_KUBECTL"); s != "" {
		return s
	}
	if m, _ := filepath.Glob("/var/cache/sandboxkit-k8s/*/bin/kubectl"); len(m) > 0 {
		return m[len(m)-1]
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		b.Skip("no kubectl for the floor")
	}
	return p
}

// BenchmarkCommand is Commands.Run("true") in a running sandbox against
// `kubectl exec POD -- true` and against the same exec done in-process
// through the API (no kubectl start-up), in the same pod.
func BenchmarkCommand(b *testing.B) {
	d := testDriver(b)
	cs, rc, err := d.Client()
	if err != nil {
		b.Fatal(err)
	}
	sb := newSandbox(b)
	pod := sb.Info().Extra["pod"]
	kc := kubectl(b)
	ctx := context.Background()
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		return nil
	}, sandboxtest.Floor{Name: "kubectl-exec", Run: func(b *testing.B) func() {
		out, err := exec.Command(kc, "--kubeconfig", kubeconfig(), "-n", namespace(), "exec", pod, "--", "true").CombinedOutput()
		if err != nil {
			b.Fatalf("kubectl exec: %v: %s", err, out)
		}
		return nil
	}}, sandboxtest.Floor{Name: "api-exec", Run: func(b *testing.B) func() {
		u := cs.CoreV1().RESTClient().Post().Namespace(namespace()).Resource("pods").Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Command: []string{"true"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
		ex, err := remotecommand.NewWebSocketExecutor(rc, http.MethodGet, u.String())
		if err != nil {
			b.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
			b.Fatalf("exec: %v: %s%s", err, out.String(), errOut.String())
		}
		return nil
	}})
}

// BenchmarkCreate is sandbox.New plus a first command (Close is not timed)
// against creating a bare pod of the same image (`sleep 3600` as its
// command) and waiting until it runs (deleting it is not timed).
func BenchmarkCreate(b *testing.B) {
	d := testDriver(b)
	cs, _, err := d.Client()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	n := 0
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		sb, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner(owner+"-bench"))
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		return func() { sb.Close() }
	}, sandboxtest.Floor{Name: "bare-pod", Run: func(b *testing.B) func() {
		n++
		name := fmt.Sprintf("sandboxkit-bench-bare-%d-%d", os.Getpid(), n)
		pods := cs.CoreV1().Pods(namespace())
		no := false
		grace := int64(1)
		_, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"sandboxkit": "1", "sandboxkit.owner": owner + "-bench"}},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "c", Image: testImage(), ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			b.Fatal(err)
		}
		deadline := time.After(2 * time.Minute)
	wait:
		for {
			select {
			case ev := <-w.ResultChan():
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted &&
					p.Status.Phase == corev1.PodRunning {
					break wait
				}
			case <-deadline:
				b.Fatal("the bare pod did not run within 2 minutes")
			}
		}
		w.Stop()
		return func() { _ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}) }
	}})
}

// BenchmarkPoolGetAndFirstCommand is Pool.Get plus a first command against
// sandbox.New plus a first command (cold) and against the command in a
// sandbox already held (warm), in the same run (sandboxtest.ComparePoolGet).
func BenchmarkPoolGetAndFirstCommand(b *testing.B) {
	d := testDriver(b)
	sandboxtest.ComparePoolGet(b, sandbox.PoolConfig{Size: 4}, sandbox.WithDriver(d), sandbox.WithOwner(owner+"-bench"))
}
