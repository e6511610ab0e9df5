// Command sandboxkit is sandboxkit's command line: it serves sandboxed
// tools to MCP clients, runs one command in a fresh sandbox, reports what
// isolation this machine can enforce, shows the library at work, and
// removes leftover sandboxes.
//
//	go install github.com/sandboxkit/sandboxkit/cmd/sandboxkit@latest
//
//	sandboxkit mcp [--http ADDR] [flags]   serve the sandbox tools over MCP
//	sandboxkit run [flags] -- CMD [ARG...] run one command in a fresh sandbox
//	sandboxkit doctor                      what this machine can enforce
//	sandboxkit demo                        a guided tour, step by step
//	sandboxkit gc [--owner NAME] [--all]   remove sandboxes their programs left behind
//
// Exit codes are stable for scripts: 0 success, 1 failure, 2 usage error;
// `run` exits with the command's own code (see `sandboxkit run --help`).
//
// Security settings (backend, workspace, network, accepted isolation
// tiers) are flags of this program only: an MCP client cannot change them.
// Logs and diagnostics go to standard error; standard output carries only
// results (and, for `mcp` over stdio, the protocol).
//
// The binary is also the sandbox's agent: the local backend re-executes it
// inside the boundary, and its init hook (package sandbox/local) takes over
// before main runs, so main never sees those invocations.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// Exit codes shared by every subcommand.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks a usage error: the message is printed with a hint to run
// --help, and the exit code is exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitError carries an exit code chosen by a subcommand (run passes the
// command's code through) with nothing more to print.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"mcp", "serve the sandbox tools to MCP clients (stdio, or streamable HTTP with --http)", runMCP},
	{"run", "run one command in a fresh sandbox; its output and exit code pass through", runRun},
	{"doctor", "report what isolation this machine can enforce and which tier a sandbox gets", runDoctor},
	{"demo", "create a sandbox and show commands, files, jobs and isolation step by step", runDemo},
	{"gc", "remove sandboxes left behind by crashed programs (Docker containers)", runGC},
}

const mainUsage = `sandboxkit gives LLM agents a safe, stateful place to run code.

Usage:
  sandboxkit <command> [flags] [args]

Commands:
%s
Run 'sandboxkit <command> --help' for the flags of a command.

Exit codes:
  0  success
  1  the command failed (an error is printed on stderr)
  2  usage error (unknown command or flag, missing argument)
  run exits with the sandboxed command's own code instead; see 'sandboxkit run --help'.
`

func printMainUsage(w io.Writer) {
	var list string
	for _, c := range commands {
		list += fmt.Sprintf("  %-7s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, mainUsage, list)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "mcp" {
		serverGC()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printMainUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return execute(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		printMainUsage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		return exitCode(c.name, err, stderr)
	}
	fmt.Fprintf(stderr, "sandboxkit: unknown command %q\n\n", args[0])
	printMainUsage(stderr)
	return exitUsage
}

// exitCode prints err the one way every subcommand reports failures and
// returns the exit code for it.
func exitCode(name string, err error, stderr io.Writer) int {
	var ue usageError
	var ee exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "sandboxkit %s: %s\nRun 'sandboxkit %s --help' for usage.\n", name, ue.msg, name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "sandboxkit %s: %v\n", name, err)
		return exitFailure
	}
}

// newFlags returns a flag set for a subcommand whose --help prints usage
// (a synopsis and a description) and the flags to stdout.
func newFlags(name, synopsis, description string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sandboxkit "+name, flag.ContinueOnError)
	// Parse errors are returned, not printed by the flag package, so that
	// they go through exitCode like every other usage error.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage:\n  sandboxkit %s %s\n\n%s\n", name, synopsis, description)
		var has bool
		fs.VisitAll(func(*flag.Flag) { has = true })
		if has {
			fmt.Fprintln(stdout, "\nFlags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	return fs
}

// parse parses args, turning flag errors into usage errors and --help into
// flag.ErrHelp after printing the usage once, on stdout.
func parse(fs *flag.FlagSet, args []string) error {
	// The flag package calls Usage itself on --help and on every parse
	// error: keep it quiet meanwhile, so that a mistyped flag gets the
	// short error on stderr (exitCode), not the whole help on stdout.
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return flag.ErrHelp
	}
	if err != nil {
		return usageError{err.Error()}
	}
	return nil
}

// parseNoArgs is parse for subcommands that take flags only.
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %q", fs.Args())
	}
	return nil
}

// mcpGCPercent is the collector's target for `sandboxkit mcp`: a new cycle
// once the heap has grown by 400% of what survived the last one (Go's
// default is 100%).
//
// Why: the server's live heap is small (a toolkit and a sandbox client per
// session), while every tool call leaves tens of KB of garbage, mostly the
// go-sdk's (docs/upstream.md); with the default target the server spent
// ~14% of its CPU marking. Measured with BenchmarkRunCommandOverMCP
// (run_command("true") over stdio, 1,500 calls, the server's own GOGC
// only, load ~30): the server's CPU per call 0.66 ms with the default,
// 0.46–0.52 ms with 400; per call 3.4–4.0 ms, 2.7–2.9 ms. The price is a
// heap a few MB larger.
const mcpGCPercent = 400

// serverGC sets the collector's target of the MCP server, unless the user
// chose one with GOGC.
func serverGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(mcpGCPercent)
	}
}
