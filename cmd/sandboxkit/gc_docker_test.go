package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
)

// Two programs share the engine: an MCP server whose sandbox is in use,
// and an operator running gc. gc for another owner does not touch the
// server's sandbox, gc for the server's owner keeps it (its creator runs)
// and says why, and only --all removes it.
func TestGCLeavesALiveServersSandbox(t *testing.T) {
	backend := "docker://" + dockerImage()
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", dockerImage()).CombinedOutput(); err != nil {
		requireOrSkip(t, "docker", fmt.Sprintf("no Docker engine with the test image %s (.ci/docker/build-image.sh): %v %s", dockerImage(), err, bytes.TrimSpace(out)))
	}
	owner := fmt.Sprintf("gc-test-server-%d", rand.IntN(1e9))
	c, srv := startStdio(t, "--backend", backend, "--owner", owner)
	checkTools(t, c)
	id, _ := createdSandbox(t, srv, 1)
	container := "sandboxkit-" + id
	running := func() bool {
		out, err := exec.Command("docker", "inspect", "--format", "{{.State.Running}}", container).CombinedOutput()
		return err == nil && strings.TrimSpace(string(out)) == "true"
	}
	if !running() {
		t.Fatalf("the server's container %s is not running", container)
	}

	r := runBinary(t, "", "gc", "--owner", owner+"-other")
	if r.code != 0 || strings.Contains(r.stdout, container) || !running() {
		t.Fatalf("gc for another owner: exit %d, stdout %q; the server's container must be untouched (running: %v)", r.code, r.stdout, running())
	}
	r = runBinary(t, "", "gc", "--owner", owner)
	if r.code != 0 || !strings.Contains(r.stdout, "kept container "+container) || !strings.Contains(r.stdout, "still runs") || !running() {
		t.Fatalf("gc for the server's owner: exit %d, stdout %q; want the container kept because its creator runs (running: %v)", r.code, r.stdout, running())
	}
	r = runBinary(t, "", "gc", "--owner", owner, "--all")
	if r.code != 0 || !strings.Contains(r.stdout, "removed container "+container) || running() {
		t.Fatalf("gc --all for the server's owner: exit %d, stdout %q; want the container removed (running: %v)", r.code, r.stdout, running())
	}
}
