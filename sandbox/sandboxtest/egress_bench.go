package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// BenchEgressDownload downloads EgressHost's 10 MB /big with curl through
// the egress proxy of a sandbox newSandbox makes (given the egress
// policy), over plain HTTP and over HTTPS through a CONNECT tunnel, and
// compares it with its floor: the same download by curl run directly on
// the host (given the name's address with --resolve, the same CA checks).
// Every iteration runs both, rotating which goes first
// (CompareWithFloors), so that both see the same machine; it reports the
// median of each (subject-ms, host-curl-ms) and their ratio
// (x-host-curl; the target is at most 1.5). Both include starting curl.
//
// A second floor, sandbox-curl-file, is the part of the subject that is
// not egress: the same curl started in the sandbox the same way, reading
// a 10 MB file of the sandbox's own (file://, no network). What the
// subject costs above it is the proxy's; where a command in the sandbox
// costs more than on the host (a container's process start, its cgroup's
// share of a busy machine), that floor shows it. Measured at load 26 on
// the 2-core machine, Docker: the file floor 52 ms against 16 ms for the
// same curl on the host, so no egress could bring that run under 1.5x.
func BenchEgressDownload(b *testing.B, newSandbox func(b *testing.B, opts ...sandbox.Option) *sandbox.Sandbox) {
	if _, err := exec.LookPath("curl"); err != nil {
		Unavailable(b, "curl", "no curl on this machine for the floor")
	}
	h := NewEgressHost(b)
	ca := filepath.Join(b.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, h.CAPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sb := newSandbox(b, sandbox.WithEgress(h.EgressPolicy()))
	if err := sb.Files.Write(ctx, "ca.pem", h.CAPEM, 0); err != nil {
		b.Fatal(err)
	}
	want := fmt.Sprint(h.BigSize)
	if res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"head", "-c", want, "/dev/zero"}, OutputFile: "big.bin"}); err != nil || res.ExitCode != 0 {
		b.Fatalf("making the file floor's file: %+v, %v", res, err)
	}
	file := "file://" + path.Join(sb.Info().Workspace, "big.bin")
	for _, scheme := range []string{"http", "https"} {
		port := h.HTTPPort
		if scheme == "https" {
			port = h.TLSPort
		}
		url := fmt.Sprintf("%s://%s:%d/big", scheme, EgressAllowed, port)
		b.Run(scheme, func(b *testing.B) {
			b.SetBytes(int64(h.BigSize))
			CompareWithFloors(b, func(b *testing.B) func() {
				res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"curl", "-sS", "-f", "--cacert", "ca.pem", "-o", "/dev/null", "-w", "%{size_download}", url}})
				if err != nil || res.ExitCode != 0 || res.Stdout != want {
					b.Fatalf("download through the proxy: %+v, %v", res, err)
				}
				return nil
			}, Floor{Name: "host-curl", Run: func(b *testing.B) func() {
				out, err := exec.Command("curl", "-sS", "-f", "--cacert", ca, "--resolve", fmt.Sprintf("%s:%d:127.0.0.1", EgressAllowed, port),
					"-o", "/dev/null", "-w", "%{size_download}", url).Output()
				if err != nil || string(out) != want {
					b.Fatalf("direct download: %q, %v", out, err)
				}
				return nil
			}}, Floor{Name: "sandbox-curl-file", Run: func(b *testing.B) func() {
				res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"curl", "-sS", "-f", "-o", "/dev/null", "-w", "%{size_download}", file}})
				if err != nil || res.ExitCode != 0 || res.Stdout != want {
					b.Fatalf("curl of the sandbox's file: %+v, %v", res, err)
				}
				return nil
			}})
		})
	}
}
