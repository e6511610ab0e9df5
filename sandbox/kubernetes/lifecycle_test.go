package kubernetes_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/kubernetes"
)

func podPhase(t *testing.T, d *kubernetes.Driver, name string) (corev1.PodPhase, bool) {
	t.Helper()
	cs, _, err := d.Client()
	if err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().Pods(namespace()).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	return p.Status.Phase, true
}

func TestCloseDeletesThePodAndItsPolicy(t *testing.T) {
	d := testDriver(t)
	sb, err := sandbox.New(context.Background(), sandbox.WithDriver(d), sandbox.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	name := sb.Info().Extra["pod"]
	if _, ok := podPhase(t, d, name); !ok {
		t.Fatalf("pod %s not found while the sandbox runs", name)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if ph, ok := podPhase(t, d, name); ok {
		t.Fatalf("pod %s still exists (phase %s) after Close", name, ph)
	}
	cs, _, _ := d.Client()
	if _, err := cs.NetworkingV1().NetworkPolicies(namespace()).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
		t.Fatalf("NetworkPolicy %s survives Close", name)
	}
}

// TestHostKilledLeavesNothingRunning kills (SIGKILL) a process that holds a
// sandbox: its attach connection drops, the agent's stdin closes, and the
// pod must stop on its own, not be restarted, within the documented bound.
func TestHostKilledLeavesNothingRunning(t *testing.T) {
	if os.Getenv("SANDBOXKIT_K8S_CHILD") == "1" {
		return
	}
	d := testDriver(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDBOXKIT_K8S_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	name := ""
	deadline := time.Now().Add(5 * time.Minute)
	for name == "" && time.Now().Before(deadline) && sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "POD "); ok {
			name = s
		}
	}
	if name == "" {
		t.Fatal("the child did not report its pod")
	}
	t.Cleanup(func() {
		kubernetes.GC(context.Background(), kubernetes.GCOptions{Owner: owner + "-child"}, driverOptions()...)
	})
	if ph, _ := podPhase(t, d, name); ph != corev1.PodRunning {
		t.Fatalf("pod %s is %q before the kill, want Running", name, ph)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	killed := time.Now()
	// The documented bound: seconds (the agent exits when its stdin
	// closes); 60 s leaves room for a loaded machine.
	for time.Since(killed) < 60*time.Second {
		ph, ok := podPhase(t, d, name)
		if !ok {
			t.Fatalf("pod %s vanished; want it stopped and kept for gc", name)
		}
		if ph == corev1.PodSucceeded || ph == corev1.PodFailed {
			t.Logf("pod stopped (%s) %v after its host was killed", ph, time.Since(killed).Round(time.Millisecond))
			// gc without All removes what a dead host left (and only that).
			removed, err := kubernetes.GC(context.Background(), kubernetes.GCOptions{Owner: owner + "-child"}, driverOptions()...)
			if err != nil || len(removed) != 1 || removed[0] != name {
				t.Fatalf("gc after the host died removed %v, %v; want [%s]", removed, err, name)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s still runs 60 s after its host was killed", name)
}

// TestHostChild is the child of TestHostKilledLeavesNothingRunning.
func TestHostChild(t *testing.T) {
	if os.Getenv("SANDBOXKIT_K8S_CHILD") != "1" {
		t.Skip("only run as the child of TestHostKilledLeavesNothingRunning")
	}
	d := kubernetes.New(driverOptions()...)
	sb, err := sandbox.New(context.Background(), sandbox.WithDriver(d), sandbox.WithOwner(owner+"-child"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	fmt.Printf("POD %s\n", sb.Info().Extra["pod"])
	time.Sleep(10 * time.Minute)
}

func TestGCRemovesLeftoverPods(t *testing.T) {
	d := testDriver(t)
	sb, err := sandbox.New(context.Background(), sandbox.WithDriver(d), sandbox.WithOwner(owner+"-gc"))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	name := sb.Info().Extra["pod"]
	removed, err := kubernetes.GC(context.Background(), kubernetes.GCOptions{Owner: owner + "-gc", All: true}, driverOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != name {
		t.Fatalf("GC removed %v, want [%s]", removed, name)
	}
	_, err = sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"true"}, Timeout: 30 * time.Second})
	for i := 0; err == nil && i < 100; i++ {
		time.Sleep(200 * time.Millisecond)
		_, err = sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"true"}, Timeout: 30 * time.Second})
	}
	if !errors.Is(err, sandbox.ErrDead) {
		t.Fatalf("a command after GC removed the pod: %v, want %s", err, sandbox.CodeDead)
	}
}

func TestMissingImageIsNotFound(t *testing.T) {
	testDriver(t)
	image := fmt.Sprintf("sandboxkit/absent:%d", time.Now().UnixNano())
	d := kubernetes.New(driverOptions(kubernetes.WithImage(image))...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner(owner))
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("New = %v, want %s", err, sandbox.CodeNotFound)
	}
	for _, want := range []string{image, "ErrImageNeverPull", "load it on the nodes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	assertNoLeftovers(t, d)
}

func TestUnschedulablePodSaysWhy(t *testing.T) {
	testDriver(t)
	d := kubernetes.New(driverOptions(kubernetes.WithNodeSelector(map[string]string{"sandboxkit.test/none": "x"}))...)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	_, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner(owner))
	if !errors.Is(err, sandbox.ErrBackend) || !strings.Contains(err.Error(), "cannot schedule") {
		t.Fatalf("New = %v, want %s saying it cannot schedule", err, sandbox.CodeBackend)
	}
	assertNoLeftovers(t, d)
}

func TestBadOptionsAreRefusedBeforeTouchingTheCluster(t *testing.T) {
	// A kubeconfig naming a port nothing listens on: a bad option must be
	// refused as such, before any API call could fail.
	d := kubernetes.New(kubernetes.WithKubeconfig(deadKubeconfig(t), ""))
	for _, opts := range []map[string]string{
		{"nosuch": "x"},
		{kubernetes.OptCPU: "lots"},
		{kubernetes.OptPull: "sometimes"},
		{kubernetes.OptUID: "0"},
		{kubernetes.OptTolerations: "a:Sometimes"},
		{kubernetes.OptDeadline: "5s"},
		{kubernetes.OptNamespace: "Not_A_Namespace"},
	} {
		var so []sandbox.Option
		for k, v := range opts {
			so = append(so, sandbox.WithBackendOption(k, v))
		}
		_, err := sandbox.New(context.Background(), append(so, sandbox.WithDriver(d))...)
		if !errors.Is(err, sandbox.ErrInvalidArgument) {
			t.Errorf("options %v: %v, want %s", opts, err, sandbox.CodeInvalidArgument)
		}
	}
}

// assertNoLeftovers fails when a sandbox pod or policy of this test's owner
// is still on the cluster.
func assertNoLeftovers(t *testing.T, d *kubernetes.Driver) {
	t.Helper()
	cs, _, err := d.Client()
	if err != nil {
		t.Fatal(err)
	}
	sel := "sandboxkit.owner=" + owner
	pods, err := cs.CoreV1().Pods(namespace()).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodPending {
			t.Errorf("pod %s left behind after a failed start", p.Name)
		}
	}
}

// TestHardDeadlineEndsThePod: activeDeadlineSeconds is the outer bound on a
// pod's life whatever its clients do; when it passes, the kubelet kills the
// pod and the instance reports why.
func TestHardDeadlineEndsThePod(t *testing.T) {
	d := testDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, driver.Config{Owner: owner, Options: map[string]string{kubernetes.OptDeadline: "15s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	select {
	case <-inst.Done():
	case <-ctx.Done():
		t.Fatal("the pod outlived its 15 s hard deadline by more than a minute")
	}
	err = inst.(*kubernetes.Pod).Err()
	var de *driver.Error
	if !errors.As(err, &de) || de.Code != driver.CodeDead || !strings.Contains(err.Error(), "hard deadline") {
		t.Fatalf("Err() = %v, want DEAD naming the hard deadline", err)
	}
}
