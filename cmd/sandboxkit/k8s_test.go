package main

import (
	"os"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestRunOnKubernetes runs a command through --backend k8s://... on the
// CI cluster (.ci/k8s/start.sh; SANDBOXKIT_K8S_KUBECONFIG names it and is
// handed to the program as KUBECONFIG).
func TestRunOnKubernetes(t *testing.T) {
	kc := os.Getenv("SANDBOXKIT_K8S_KUBECONFIG")
	if kc == "" {
		sandboxtest.Unavailable(t, "kubernetes", "SANDBOXKIT_K8S_KUBECONFIG is not set (see .ci/k8s/README.md)")
	}
	t.Setenv("KUBECONFIG", kc)
	ns := os.Getenv("SANDBOXKIT_K8S_NAMESPACE")
	if ns == "" {
		ns = "sandboxkit-test"
	}
	r := runBinary(t, "", "run", "--backend", "k8s://"+ns+"?image=sandboxkit/python:test&pull=Never", "--", "sh", "-c", "echo hello from $(id -u); cat /proc/1/comm")
	if r.code != 0 || !strings.Contains(r.stdout, "hello from ") || !strings.Contains(r.stdout, "agent") {
		t.Fatalf("run on k8s: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "hello from 0\n") {
		t.Fatalf("the command ran as root: %q", r.stdout)
	}
	bad := runBinary(t, "", "run", "--backend", "k8s://"+ns+"?nosuch=1", "--", "true")
	if bad.code == 0 || !strings.Contains(bad.stderr, "unknown kubernetes option") {
		t.Fatalf("an unknown option: exit %d, stderr %q", bad.code, bad.stderr)
	}
}
