package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/kubernetes"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestPoolUnderLoad is issue 22's load test on Kubernetes
// (sandboxtest.RunPoolLoad): 50 concurrent Gets on a pool of 8, and after
// Close the cluster holds no pod and no NetworkPolicy of the pool's (the
// workspace is an emptyDir of the pod, so none is left either). Pod starts
// wait on the cluster more than on this machine's CPU, so four start at
// once.
func TestPoolUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 58 pods; skipped with -short")
	}
	d := testDriver(t)
	cs, _, err := d.Client()
	if err != nil {
		t.Fatal(err)
	}
	// An owner of this run's own (a valid label value), so that the count
	// is of this pool's objects only.
	owner := fmt.Sprintf("%s-pool-%d-%d", owner, os.Getpid(), time.Now().Unix())
	sandboxtest.RunPoolLoad(t, sandboxtest.PoolLoadOptions{Size: 8, Callers: 50, MaxStarting: 4, Timeout: 10 * time.Minute,
		Leftovers: func() []string {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sel := metav1.ListOptions{LabelSelector: kubernetes.LabelOwner + "=" + owner}
			var left []string
			pods, err := cs.CoreV1().Pods(namespace()).List(ctx, sel)
			if err != nil {
				return []string{"cannot list pods: " + err.Error()}
			}
			for _, p := range pods.Items {
				left = append(left, fmt.Sprintf("pod %s (%s)", p.Name, p.Status.Phase))
			}
			pols, err := cs.NetworkingV1().NetworkPolicies(namespace()).List(ctx, sel)
			if err != nil {
				return append(left, "cannot list NetworkPolicies: "+err.Error())
			}
			for _, p := range pols.Items {
				left = append(left, "NetworkPolicy "+p.Name)
			}
			return left
		}}, sandbox.WithDriver(d), sandbox.WithOwner(owner))
}
