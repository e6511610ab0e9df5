package sandbox_test

// Benchmarks against their floors in the same run (issue 2 targets: a
// command <= 2x a plain exec; a small read <= 200 µs; search <= 2x grep).
// Each pairs the sandbox with its floor iteration by iteration and reports
// medians and the ratio (sandboxtest.CompareWithFloors):
//
//	go test -run '^$' -bench Floor -benchtime 300x ./sandbox
//	go test -run '^$' -bench FloorSearch -benchtime 5x ./sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

func newBenchSandbox(b *testing.B, opts ...sandbox.Option) *sandbox.Sandbox {
	b.Helper()
	sb, err := sandbox.New(context.Background(), append([]sandbox.Option{sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Close() })
	return sb
}

// BenchmarkFloorCommandRun: Commands.Run("true") in a warm sandbox vs
// exec.Command("true").Run() from the host.
func BenchmarkFloorCommandRun(b *testing.B) {
	sb := newBenchSandbox(b)
	ctx := context.Background()
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		if _, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		return nil
	}, sandboxtest.Floor{Name: "exec", Run: func(b *testing.B) func() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
		return nil
	}})
}

// BenchmarkFloorRead1KB: a 1 KB Files.ReadFile vs os.ReadFile.
func BenchmarkFloorRead1KB(b *testing.B) {
	data := make([]byte, 1024)
	sb := newBenchSandbox(b)
	ctx := context.Background()
	if err := sb.Files.Write(ctx, "k.bin", data, 0); err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(b.TempDir(), "k.bin")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		b.Fatal(err)
	}
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		if got, err := sb.Files.ReadFile(ctx, "k.bin"); err != nil || len(got) != len(data) {
			b.Fatalf("ReadFile: %d bytes, %v", len(got), err)
		}
		return nil
	}, sandboxtest.Floor{Name: "osread", Run: func(b *testing.B) func() {
		if _, err := os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
		return nil
	}})
}

// BenchmarkFloorSearchGoSrc: Files.Search over the Go source tree vs
// grep -rn (and ripgrep, if installed) with the same expression.
func BenchmarkFloorSearchGoSrc(b *testing.B) {
	const root, pattern = "/usr/local/go/src", `func New[A-Z]\w*Reader`
	if _, err := os.Stat(root); err != nil {
		b.Skip("no Go source tree at", root)
	}
	sb := newBenchSandbox(b, sandbox.WithWorkspace(root))
	ctx := context.Background()
	search := func(b *testing.B) func() {
		res, err := sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: pattern, MaxResults: 100000})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Matches) == 0 {
			b.Fatal("no match in the Go source tree")
		}
		return nil
	}
	var floors []sandboxtest.Floor
	for _, tool := range [][]string{{"grep", "-rnE", `func New[A-Z][[:alnum:]_]*Reader`, root}, {"rg", "-n", pattern, root}} {
		if _, err := exec.LookPath(tool[0]); err != nil {
			continue
		}
		floors = append(floors, sandboxtest.Floor{Name: tool[0], Run: func(b *testing.B) func() {
			if out, err := exec.Command(tool[0], tool[1:]...).Output(); err != nil || len(out) == 0 {
				b.Fatalf("%s: %v", tool[0], err)
			}
			return nil
		}})
	}
	sandboxtest.CompareWithFloors(b, search, floors...)
}
