package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Exit codes of run when the command could not run to its end. They follow
// timeout(1) and env(1), so scripts can tell them from the command's own.
const (
	exitTimeout     = 124 // the command was killed at its timeout
	exitInternal    = 125 // sandboxkit failed (the sandbox could not be created)
	exitCannotStart = 127 // the command could not be started (not found, not executable)
)

const runDescription = `Run one command in a fresh sandbox and remove the sandbox afterwards. Its
stdin, stdout and stderr are passed through as it runs (past 1 MiB on a stream,
only its start and end are kept, with a marker saying how much was cut).
sandboxkit exits with the command's exit code, or:
  124      the command was killed at its --timeout
  125      sandboxkit itself failed (e.g. the sandbox could not be created)
  127      the command could not be started (not found or not executable)
  128+N    signal N killed the command (130 when sandboxkit was interrupted)
  2        usage error`

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "[flags] -- CMD [ARG...]", runDescription+"\n\n"+sandboxFlagsHelp, stdout)
	var sf sandboxFlags
	sf.register(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "kill the command (and every process it started) after this long")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no command given: sandboxkit run [flags] -- CMD [ARG...]")
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive, got %s", *timeout)
	}
	opts, closeBackend, err := sf.options()
	if err != nil {
		return err
	}
	defer closeBackend()
	if *timeout > sandbox.DefaultLimits.MaxTimeout {
		opts = append(opts, sandbox.WithLimits(sandbox.Limits{MaxTimeout: *timeout}))
	}
	if *timeout > sandbox.DefaultTTL {
		// The sandbox must outlive the command it was made for.
		opts = append(opts, sandbox.WithTTL(*timeout+time.Minute))
	}
	sb, err := sandbox.New(ctx, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxkit run: %v\n", err)
		return exitError{exitInternal}
	}
	defer sb.Close()
	// Output is passed on as it comes, so that a long command shows its
	// progress; the chunks arrive in order from one reader.
	onOutput := func(c sandbox.Chunk) {
		if c.Stream == sandbox.Stderr {
			stderr.Write(c.Data)
		} else {
			stdout.Write(c.Data)
		}
	}
	cmd := sandbox.Command{Args: fs.Args(), Timeout: *timeout, OnOutput: onOutput}
	if stdinUsable() {
		cmd.Stdin = os.Stdin
	}
	res, err := sb.Commands.Run(ctx, cmd)
	switch {
	case errors.Is(err, sandbox.ErrTimeout):
		fmt.Fprintf(stderr, "sandboxkit run: killed after the %s timeout\n", *timeout)
		return exitError{exitTimeout}
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "sandboxkit run: interrupted; the command and the sandbox were stopped")
		return exitError{128 + int(syscall.SIGINT)}
	case errors.Is(err, sandbox.ErrExec), errors.Is(err, sandbox.ErrNotFound):
		fmt.Fprintf(stderr, "sandboxkit run: %v\n", err)
		return exitError{exitCannotStart}
	case err != nil:
		fmt.Fprintf(stderr, "sandboxkit run: %v\n", err)
		return exitError{exitInternal}
	case res.Signal != "":
		return exitError{128 + signalNumber(res.Signal)}
	}
	return exitError{res.ExitCode}
}

// stdinUsable reports whether standard input can be given to the command:
// not when it is closed (a daemon, or `<&-`), so that the command reads
// /dev/null instead of failing.
func stdinUsable() bool {
	_, err := os.Stdin.Stat()
	return err == nil
}
