package sandbox_test

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestPythonListReportsErrors: Python.List used to return nil both for "no contexts" and for
// "the sandbox is closed"; a caller could not tell an empty sandbox from a dead one.
func TestPythonListReportsErrors(t *testing.T) {
	ctx := context.Background()
	sb := sandboxtest.NewDefault(t)
	if err := sb.Python.Create(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Python.Run(ctx, "x = 1", sandbox.PythonRunOptions{Context: "a"}); err != nil {
		t.Fatal(err)
	}
	cs, err := sb.Python.List(ctx)
	if err != nil || len(cs) != 1 || cs[0].Name != "a" || cs[0].ExecutionCount != 1 || cs[0].PID <= 0 || cs[0].Version == "" {
		t.Fatalf("List = %+v, %v; want context a after one run, with its interpreter", cs, err)
	}
	sb.Close()
	if cs, err := sb.Python.List(ctx); sandbox.CodeOf(err) != sandbox.CodeClosed {
		t.Errorf("List after Close = %+v, %v; want %s", cs, err, sandbox.CodeClosed)
	}
}
