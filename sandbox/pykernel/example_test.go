package pykernel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/pykernel"
)

// A context keeps its state across runs; the final expression is the result.
func Example() {
	ctx := context.Background()
	k, err := pykernel.Start(ctx, pykernel.ExecProc, pykernel.Options{
		Python: "/usr/bin/python3",
		Env:    []string{"PATH=/usr/bin:/bin"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer k.Close()

	if _, err := k.Run(ctx, "x = 41", pykernel.RunOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	ex, err := k.Run(ctx, "print('hello')\nx + 1", pykernel.RunOptions{Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(ex.Stdout)
	fmt.Println(ex.Result.Plain(), ex.Count)

	ex, _ = k.Run(ctx, "1/0", pykernel.RunOptions{})
	fmt.Println(ex.Error)
	// Output:
	// hello
	// 42 2
	// ZeroDivisionError: division by zero
}
