package sandbox_test

// Benchmarks against their floors in the same run (issue 2 targets: a
// command <= 2x a plain exec; a small read <= 200 µs; search <= 2x grep).
// Run: go test -run '^$' -bench Floor -benchtime 200x ./sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
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

func BenchmarkFloorCommandRun(b *testing.B) {
	b.Run("sandbox", func(b *testing.B) {
		sb := newBenchSandbox(b)
		ctx := context.Background()
		for b.Loop() {
			if _, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain-exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkFloorRead1KB(b *testing.B) {
	data := make([]byte, 1024)
	b.Run("sandbox", func(b *testing.B) {
		sb := newBenchSandbox(b)
		ctx := context.Background()
		if err := sb.Files.Write(ctx, "k.bin", data, 0); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := sb.Files.ReadFile(ctx, "k.bin"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os.ReadFile", func(b *testing.B) {
		p := filepath.Join(b.TempDir(), "k.bin")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := os.ReadFile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkFloorSearchGoSrc(b *testing.B) {
	const root, pattern = "/usr/local/go/src", `func New[A-Z]\w*Reader`
	if _, err := os.Stat(root); err != nil {
		b.Skip("no Go source tree at", root)
	}
	b.Run("sandbox", func(b *testing.B) {
		sb := newBenchSandbox(b, sandbox.WithWorkspace(root))
		ctx := context.Background()
		for b.Loop() {
			if _, err := sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: pattern, MaxResults: 100000}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tool := range [][]string{{"grep", "-rnE", `func New[A-Z][[:alnum:]_]*Reader`, root}, {"rg", "-n", pattern, root}} {
		if _, err := exec.LookPath(tool[0]); err != nil {
			continue
		}
		b.Run(tool[0], func(b *testing.B) {
			for b.Loop() {
				_ = exec.Command(tool[0], tool[1:]...).Run()
			}
		})
	}
}
