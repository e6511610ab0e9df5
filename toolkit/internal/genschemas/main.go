// Command genschemas writes the argument schema of every built-in tool to <dir>/<tool>.json, so
// the public tool contract can be read and diffed without running Go. Run it with go generate
// in package toolkit; TestBuiltinSchemaFilesAreFresh fails when the files are stale.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxkit/sandboxkit/schemas"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

func main() {
	dir := flag.String("out", "../schemas", "directory to write <tool>.json into")
	flag.Parse()
	for _, t := range toolkit.ForSandbox(nil).Tools() {
		if err := schemas.WriteFile(filepath.Join(*dir, t.Name()+".json"), t.Schema()); err != nil {
			fmt.Fprintln(os.Stderr, "genschemas:", err)
			os.Exit(1)
		}
	}
}
