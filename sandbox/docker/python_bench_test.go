package docker_test

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// BenchmarkPythonNewContext: a new Python context with numpy and pandas
// imported, forked from the template of WithPythonImports, in a Docker
// sandbox, against its floors in the same run (see
// sandboxtest.ComparePythonContexts; issue 22's target: <= 10 ms).
//
//	go test -run '^$' -bench PythonNewContext -benchtime 20x ./sandbox/docker
func BenchmarkPythonNewContext(b *testing.B) {
	d := testDriver(b)
	sandboxtest.ComparePythonContexts(b, func(opts ...sandbox.Option) (*sandbox.Sandbox, error) {
		return sandbox.New(context.Background(), append([]sandbox.Option{sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-bench")}, opts...)...)
	})
}
