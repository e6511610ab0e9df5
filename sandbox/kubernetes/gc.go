package kubernetes

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// GCOptions selects the leftovers GC removes.
type GCOptions struct {
	// Owner, when set, limits GC to sandboxes labelled with this owner.
	Owner string
	// OlderThan spares sandboxes created less than this long ago, so that
	// a GC run does not kill sandboxes another process is using right now.
	// Zero removes every matching one.
	OlderThan time.Duration
	// All also removes pods that still run. By default GC removes only
	// pods whose agent has exited (the client that held the attach
	// stream is gone: it died, or closed without deleting) or that never
	// started, and keeps running ones, which a live client may be using.
	All bool
}

// GC removes the pods and NetworkPolicies this backend left in the
// driver's namespace (label sandboxkit=1, e.g. after a host crash): pods
// whose agent has exited, or every one with All. It returns the names of
// the pods it removed. It is what
// `sandboxkit gc` runs for the kubernetes backend.
func GC(ctx context.Context, o GCOptions, opts ...Option) ([]string, error) {
	d := New(opts...)
	if d.confErr != nil {
		return nil, d.configError()
	}
	set := labels.Set{LabelSandboxkit: "1"}
	if o.Owner != "" {
		set[LabelOwner] = o.Owner
	}
	sel := labels.SelectorFromSet(set).String()
	cutoff := time.Now().Add(-o.OlderThan)
	old := func(m metav1.ObjectMeta) bool {
		if o.OlderThan <= 0 {
			return true
		}
		if s, err := strconv.ParseInt(m.Labels[LabelCreated], 10, 64); err == nil {
			return time.Unix(s, 0).Before(cutoff)
		}
		return m.CreationTimestamp.Time.Before(cutoff)
	}
	ns := d.s.namespace
	pods, err := d.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, d.apiError("listing sandbox pods", err)
	}
	var removed []string
	var errs []error
	grace := int64(1)
	for _, p := range pods.Items {
		if !old(p.ObjectMeta) {
			continue
		}
		if !o.All && p.Status.Phase == corev1.PodRunning {
			continue
		}
		err := d.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, d.apiError("deleting pod "+p.Name, err))
			continue
		}
		removed = append(removed, p.Name)
	}
	// A policy goes with its pod: when the pod is gone (removed now, or
	// earlier without its policy).
	live := map[string]bool{}
	for _, p := range pods.Items {
		live[p.Name] = !slices.Contains(removed, p.Name)
	}
	pols, err := d.cs.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		errs = append(errs, d.apiError("listing sandbox NetworkPolicies", err))
	} else {
		for _, p := range pols.Items {
			if live[p.Name] || !old(p.ObjectMeta) {
				continue
			}
			if err := d.cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, d.apiError("deleting NetworkPolicy "+p.Name, err))
			}
		}
	}
	return removed, errors.Join(errs...)
}

// Report is what Check found out about the cluster, for `sandboxkit doctor`.
type Report struct {
	Server    string // API server address
	Version   string // its version
	Namespace string
	// Allowed maps each permission the backend needs ("create pods",
	// "create pods/attach", ...) to whether RBAC grants it.
	Allowed map[string]bool
	// Network is the network measurement of a test sandbox ("" when none
	// was started).
	Network string
	// NetworkEnforced reports whether that measurement found the network
	// closed.
	NetworkEnforced bool
}

// permissions are what Start, Close, Pause and GC need in the namespace.
var permissions = []struct{ verb, group, resource, sub string }{
	{"create", "", "pods", ""}, {"get", "", "pods", ""}, {"list", "", "pods", ""}, {"watch", "", "pods", ""},
	{"delete", "", "pods", ""}, {"create", "", "pods", "attach"}, {"create", "", "pods", "exec"},
	{"create", "networking.k8s.io", "networkpolicies", ""}, {"delete", "networking.k8s.io", "networkpolicies", ""},
	{"list", "", "events", ""},
}

// Check asks the cluster whether this backend can work there: is it
// reachable, does RBAC allow what the backend needs, and (when probe is
// set) does a real sandbox measure its network closed. The probe starts
// and closes one sandbox pod.
func (d *Driver) Check(ctx context.Context, probe bool) (*Report, error) {
	if d.confErr != nil {
		return nil, d.configError()
	}
	r := &Report{Server: d.rest.Host, Namespace: d.s.namespace, Allowed: map[string]bool{}}
	v, err := d.cs.Discovery().ServerVersion()
	if err != nil {
		return r, d.apiError("asking the API server for its version", err)
	}
	r.Version = v.GitVersion
	for _, p := range permissions {
		rev, err := d.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{
			Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
				Namespace: d.s.namespace, Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.sub,
			}},
		}, metav1.CreateOptions{})
		name := p.verb + " " + p.resource
		if p.sub != "" {
			name += "/" + p.sub
		}
		r.Allowed[name] = err == nil && rev.Status.Allowed
	}
	if probe {
		// Accept an open network by name here: the point is to report it.
		inst, err := d.Start(ctx, driver.Config{Owner: "sandboxkit-doctor", Options: map[string]string{OptAcceptNetwork: "true"}})
		if err != nil {
			return r, err
		}
		iso := inst.Isolation()
		r.Network = iso.Extra["network_probe"]
		for _, c := range iso.Controls {
			if c.Name == "network" {
				r.NetworkEnforced = c.Enforced
			}
		}
		if err := inst.Close(ctx); err != nil {
			return r, err
		}
	}
	return r, nil
}
