package sandbox_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// newSandbox makes the sandbox each example works in: the default (namespace) tier where this
// machine has it, else the weaker tiers, accepted by name.
func newSandbox(ctx context.Context) *sandbox.Sandbox {
	sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		log.Fatal(err) // SBX_ISOLATION_UNAVAILABLE says what this machine lacks
	}
	return sb
}

// A command's failure is data in the Result; the error is for the sandbox's own failures.
func ExampleCommands_Run() {
	ctx := context.Background()
	sb := newSandbox(ctx)
	defer sb.Close()

	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "echo hello; echo oops >&2; exit 3"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d, stdout %q, stderr %q\n", res.ExitCode, res.Stdout, res.Stderr)
	// Output: exit 3, stdout "hello\n", stderr "oops\n"
}

// A background job runs on after Start returns; Output reads what it printed from a cursor.
func ExampleCommands_Start() {
	ctx := context.Background()
	sb := newSandbox(ctx)
	defer sb.Close()

	job, err := sb.Commands.Start(ctx, sandbox.Command{Shell: "for i in 1 2 3; do echo line $i; done"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := job.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	out, err := job.Output(ctx, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d\n%s", st.ExitCode, out.Data)
	// Output:
	// exit 0
	// line 1
	// line 2
	// line 3
}

// Files works on the sandbox's workspace; paths are relative to it and cannot leave it.
func ExampleFiles() {
	ctx := context.Background()
	sb := newSandbox(ctx)
	defer sb.Close()

	if err := sb.Files.Write(ctx, "src/app.py", []byte("DEBUG = True\nprint('hi')\n"), 0); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Files.Edit(ctx, "src/app.py", "DEBUG = True", "DEBUG = False", sandbox.EditOptions{}); err != nil {
		log.Fatal(err)
	}
	found, err := sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: "DEBUG"})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range found.Matches {
		fmt.Printf("%s:%d:%s\n", m.Path, m.Line, m.Text)
	}
	_, err = sb.Files.ReadFile(ctx, "../etc/passwd")
	fmt.Println(sandbox.CodeOf(err))
	// Output:
	// src/app.py:1:DEBUG = False
	// SBX_PATH_ESCAPE
}

// A Python context keeps its state between runs; the value of the last expression is the
// result, and an exception is data in the Execution.
func ExamplePython_Run() {
	ctx := context.Background()
	sb := newSandbox(ctx)
	defer sb.Close()
	if !sb.Info().PythonAvailable {
		log.Fatal("no python3 in this sandbox")
	}

	if _, err := sb.Python.Run(ctx, "total = sum(range(10))", sandbox.PythonRunOptions{}); err != nil {
		log.Fatal(err)
	}
	ex, err := sb.Python.Run(ctx, "print('adding'); total + 1", sandbox.PythonRunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stdout %q, result %s\n", ex.Stdout, ex.Result.Plain())

	ex, err = sb.Python.Run(ctx, "1/0", sandbox.PythonRunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ex.OK(), ex.Error)
	// Output:
	// stdout "adding\n", result 46
	// false ZeroDivisionError: division by zero
}

// A bash session keeps its directory and variables between commands, like a terminal.
func ExampleShells_Open() {
	ctx := context.Background()
	sb := newSandbox(ctx)
	defer sb.Close()

	sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sh.Close()
	if _, err := sh.Run(ctx, "mkdir -p build && cd build && GREETING=hi", sandbox.ShellRunOptions{}); err != nil {
		log.Fatal(err)
	}
	res, err := sh.Run(ctx, `echo "$GREETING from $(basename "$PWD")"`, sandbox.ShellRunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (exit %d)\n", strings.TrimSpace(res.Output), *res.ExitCode)
	// Output: hi from build (exit 0)
}
