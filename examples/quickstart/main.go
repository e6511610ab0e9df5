// Command quickstart is the README's first example: create a sandbox, run
// a command, keep Python state between runs, and read a file back.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

func main() {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close()

	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "echo hello from $(uname -s)"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)

	if _, err := sb.Python.Run(ctx, "total = sum(range(10))", sandbox.PythonRunOptions{}); err != nil {
		log.Fatal(err)
	}
	ex, err := sb.Python.Run(ctx, "total * 2", sandbox.PythonRunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("python says", ex.Result.Plain())

	if err := sb.Files.Write(ctx, "notes/hello.txt", []byte("kept in the workspace\n"), 0); err != nil {
		log.Fatal(err)
	}
	data, err := sb.Files.ReadFile(ctx, "notes/hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(data))
	fmt.Println("isolation:", sb.Info().Isolation)
}
