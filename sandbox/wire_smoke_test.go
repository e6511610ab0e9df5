package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

func TestWireSmoke(t *testing.T) {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ex, err := sb.Python.Run(ctx, "x = 41\nx+1", sandbox.PythonRunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("result %q stdout %q", ex.Result.Plain(), ex.Stdout)
	ex, err = sb.Python.Run(ctx, "import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()", sandbox.PythonRunOptions{})
	t.Logf("%v %d outputs err=%v", err, len(ex.Outputs), ex.Error)
	sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sh.Run(ctx, "cd /tmp; FOO=bar; echo hi", sandbox.ShellRunOptions{Timeout: 5 * time.Second})
	t.Logf("%+v %v", r, err)
	r, err = sh.Run(ctx, "echo $FOO; pwd", sandbox.ShellRunOptions{Timeout: 5 * time.Second})
	t.Logf("%+v %v", r, err)
}
