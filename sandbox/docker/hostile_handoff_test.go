package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// Found in review (on the first handoff code Close never returned: "did
// not return within 120 s"): any program in a Docker
// sandbox with an egress policy can connect to the handoff socket (0666),
// hand the host one end of a loopback TCP pair it made itself, and then
// clear O_NONBLOCK on its own copy: O_NONBLOCK belongs to the open file
// description the host shares. The host's proxy then reads that socket
// with a read that blocks in the kernel (its header deadline no longer
// works), and Sandbox.Close, which closes the egress proxy's connections
// before it stops the container, blocks in that connection's Close
// (internal/poll waits for the read in progress): Close never returns and
// the container keeps running. The host now takes only sockets the proxy
// accepted and never lets a handed socket's flag block it.
func TestProgramCannotWedgeCloseThroughTheHandoffSocket(t *testing.T) {
	h := sandboxtest.NewEgressHost(t)
	d := testDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-test"), sandbox.WithEgress(h.EgressPolicy()))
	if err != nil {
		t.Fatal(err)
	}
	probe := `
import socket, struct, fcntl, os, time
u = socket.socket(socket.AF_UNIX)
u.connect("/run/sandboxkit-egress.sock")
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
a = socket.create_connection(srv.getsockname())
b, _ = srv.accept()
socket.send_fds(u, [struct.pack(">IIB", 0, 1000000, 19)], [b.fileno()])
time.sleep(2)  # the host's net.FileConn has set O_NONBLOCK by now
fl = fcntl.fcntl(b.fileno(), fcntl.F_GETFL)
fcntl.fcntl(b.fileno(), fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
a.sendall(b"G")  # the host's parked read wakes, reads it, and its next read blocks in the kernel
time.sleep(1)
open("ready", "w").close()
time.sleep(600)
`
	if err := sb.Files.Write(ctx, "probe.py", []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	// A daemon of the model's, as any background server it starts.
	if res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "(setsid python3 probe.py >probe.log 2>&1 &)"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("starting the probe: %+v %v", res, err)
	}
	ws := sb.Info().HostWorkspace
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ws != "" {
			if _, err := os.Stat(filepath.Join(ws, "ready")); err == nil {
				break
			}
		} else if res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "test -e ready"}); err == nil && res.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe never got ready")
		}
		time.Sleep(200 * time.Millisecond)
	}
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- sb.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close returned after %v: %v", time.Since(start), err)
	case <-time.After(120 * time.Second):
		t.Fatalf("Sandbox.Close did not return within 120 s: a program in the container wedged the host's egress proxy (handed-over socket made blocking)")
	}
}
