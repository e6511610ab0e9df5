package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox/kubernetes"
)

// doctorK8s reports the cluster of --backend k8s://...: reachable, which
// permissions RBAC grants, and whether a real sandbox pod measures its
// network closed (it starts and deletes one pod). It returns false when
// sandboxes cannot be created there with the default settings.
func doctorK8s(ctx context.Context, spec string, stdout io.Writer) (bool, error) {
	d, _, err := k8sBackend(spec)
	if err != nil {
		return false, err
	}
	r, err := d.Check(ctx, true)
	if r != nil {
		fmt.Fprintf(stdout, "%-16s %s (%s), namespace %s\n", "kubernetes", r.Server, r.Version, r.Namespace)
		for _, p := range slices.Sorted(maps.Keys(r.Allowed)) {
			state := "no "
			if r.Allowed[p] {
				state = "yes"
			}
			fmt.Fprintf(stdout, "%-16s %s  RBAC: %s\n", "", state, p)
		}
		if r.Network != "" {
			state := "NOT enforced (sandboxes are refused unless acceptOpenNetwork=true)"
			if r.NetworkEnforced {
				state = "enforced"
			}
			fmt.Fprintf(stdout, "%-16s NetworkPolicy %s: %s\n", "", state, r.Network)
		}
	}
	if err != nil {
		fmt.Fprintf(stdout, "%-16s fails: %v\n", "kubernetes", err)
		return false, nil
	}
	ok := r.NetworkEnforced
	for _, v := range r.Allowed {
		ok = ok && v
	}
	return ok, nil
}

// gcK8s removes leftover sandbox pods in the namespace of the current
// kubeconfig context; an unconfigured or unreachable cluster is not an error.
func gcK8s(ctx context.Context, o kubernetes.GCOptions, stdout, stderr io.Writer) (int, error) {
	pods, err := kubernetes.GC(ctx, o)
	for _, n := range pods {
		fmt.Fprintln(stdout, "removed pod", n)
	}
	if kubernetes.IsUnreachable(err) {
		if !strings.Contains(err.Error(), "no Kubernetes cluster is configured") {
			fmt.Fprintln(stderr, "gc: no Kubernetes cluster reachable, no pods checked:", err)
		}
		err = nil
	}
	return len(pods), err
}
