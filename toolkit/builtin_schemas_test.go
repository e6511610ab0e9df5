package toolkit_test

import (
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/schemas"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

func TestBuiltinSchemaFilesAreFresh(t *testing.T) {
	for _, tool := range toolkit.ForSandbox(nil).Tools() {
		if err := schemas.CompareFile(filepath.Join("..", "schemas", tool.Name()+".json"), tool.Schema()); err != nil {
			t.Errorf("%v (run go generate ./toolkit)", err)
		}
	}
}
