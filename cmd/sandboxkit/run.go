package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Exit codes of run when the command could not run to its end.
const (
	exitTimeout  = 124 // the command was killed at its timeout
	exitInternal = 125 // sandboxkit failed (the sandbox could not be created)
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "[flags] -- CMD [ARG...]",
		"Run one command in a fresh sandbox and remove the sandbox afterwards. Its stdout and\nstderr are passed through, and sandboxkit exits with the command's exit code;\n124 when it timed out, 125 when sandboxkit itself failed, 128+N when signal N killed it.\n\n"+sandboxFlagsHelp, stdout)
	var sf sandboxFlags
	sf.register(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "kill the command after this long")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no command given: sandboxkit run [flags] -- CMD [ARG...]")
	}
	opts, closeBackend, err := sf.options()
	if err != nil {
		return err
	}
	defer closeBackend()
	if *timeout > sandbox.DefaultLimits.MaxTimeout {
		opts = append(opts, sandbox.WithLimits(sandbox.Limits{MaxTimeout: *timeout}))
	}
	sb, err := sandbox.New(ctx, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxkit run: %v\n", err)
		return exitError{exitInternal}
	}
	defer sb.Close()
	res, err := sb.Commands.Run(ctx, sandbox.Command{Args: fs.Args(), Stdin: os.Stdin, Timeout: *timeout})
	if res != nil {
		io.WriteString(stdout, res.Stdout)
		io.WriteString(stderr, res.Stderr)
	}
	switch {
	case errors.Is(err, sandbox.ErrTimeout):
		fmt.Fprintf(stderr, "sandboxkit run: killed after the %s timeout\n", *timeout)
		return exitError{exitTimeout}
	case err != nil:
		fmt.Fprintf(stderr, "sandboxkit run: %v\n", err)
		return exitError{exitInternal}
	case res.Signal != "":
		return exitError{128 + signalNumber(res.Signal)}
	}
	return exitError{res.ExitCode}
}
