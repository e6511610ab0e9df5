package sandbox_test

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "echo hi; echo err >&2; env; exit 3"})
	t.Logf("%+v %v", res, err)
	if err := sb.Files.Write(ctx, "a/b.txt", []byte("hello\n"), 0); err != nil {
		t.Fatal(err)
	}
	b, err := sb.Files.ReadFile(ctx, "a/b.txt")
	t.Logf("%q %v", b, err)
	_, err = sb.Files.ReadFile(ctx, "../../etc/passwd")
	t.Logf("%v", err)
	t.Logf("%+v", sb.Info())
}
