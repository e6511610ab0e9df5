package fake

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Matcher decides whether a rule of the script answers a command line, a
// Python cell or a shell command. Make one with Exact, Regexp or Func.
type Matcher interface {
	// Match reports whether the rule applies to text.
	Match(text string) bool
	// String describes the matcher in messages.
	String() string
}

type exact string

func (e exact) Match(s string) bool { return string(e) == s }
func (e exact) String() string      { return "fake.Exact(" + strconv.Quote(string(e)) + ")" }

// Exact matches text equal to s (after the surrounding white space of both
// is trimmed, so "ls\n" and "ls" are the same command).
func Exact(s string) Matcher { return exact(strings.TrimSpace(s)) }

type rx struct{ re *regexp.Regexp }

func (r rx) Match(s string) bool { return r.re.MatchString(s) }
func (r rx) String() string      { return "fake.Regexp(" + strconv.Quote(r.re.String()) + ")" }

// Regexp matches text in which the regular expression finds a match
// (anchor it with ^ and $ to match the whole text). It panics on a bad
// expression, like regexp.MustCompile: scripts are written in tests.
func Regexp(expr string) Matcher { return rx{regexp.MustCompile(expr)} }

type fn struct {
	desc string
	f    func(string) bool
}

func (f fn) Match(s string) bool { return f.f(s) }
func (f fn) String() string      { return "fake.Func(" + strconv.Quote(f.desc) + ")" }

// Func matches text for which f returns true; desc names it in messages.
func Func(desc string, f func(text string) bool) Matcher { return fn{desc, f} }

// Reply is the scripted outcome of a command or background job.
type Reply struct {
	// Stdout and Stderr are what the command prints.
	Stdout string
	Stderr string
	// ExitCode is the command's exit status (a non-zero status is data in
	// the result, as on a real backend).
	ExitCode int
	// Hang makes the command run until its timeout or until it is
	// cancelled or killed, as a command that never ends would; Run then
	// returns SBX_TIMEOUT with the partial output (Stdout, Stderr), exactly
	// like the real backends. Give the command a short Timeout in tests.
	Hang bool
}

// Exec describes a command as a scripted function sees it.
type Exec struct {
	// Text is the command line: the script of `sh -c`, or the arguments
	// joined with spaces (quoted where needed).
	Text string
	// Args is the argv the sandbox was asked to run.
	Args []string
	// Dir is the working directory relative to the workspace ("." for it).
	Dir string
	// Env holds the variables the call added (KEY=VALUE).
	Env []string
	// Stdin is everything the caller wrote to the command's stdin.
	Stdin []byte
	// Workspace is the sandbox's workspace, so a scripted
	// command can have effects on files (a build writing its output).
	Workspace *Workspace
}

// PythonReply is the scripted outcome of a Python cell.
type PythonReply struct {
	// Stdout and Stderr are what the cell prints.
	Stdout string
	Stderr string
	// Result is the text/plain form of the cell's value ("" for none).
	Result string
	// ResultData adds other MIME forms of the value (e.g. "text/html").
	ResultData map[string][]byte
	// Displays are display() outputs, each a MIME bundle; a bundle without
	// "text/plain" gets one. Images are raw bytes (e.g. "image/png").
	Displays []map[string][]byte
	// Error is the exception the cell raised, nil for none.
	Error *PythonError
	// Hang makes the cell run until it is interrupted (timeout or
	// cancellation); it then ends with KeyboardInterrupt and the context
	// keeps its state, as on a real kernel.
	Hang bool
}

// PythonError is an exception raised by a scripted cell.
type PythonError struct {
	Name  string // e.g. "ZeroDivisionError"
	Value string // e.g. "division by zero"
	// Traceback is the traceback as Python prints it, one line per element.
	Traceback []string
}

// ShellReply is the scripted outcome of a command in a bash session.
type ShellReply struct {
	// Output is what the command prints to the terminal.
	Output string
	// ExitCode is the command's exit status ($? afterwards).
	ExitCode int
	// Cwd is the session's working directory after the command; empty
	// keeps the current one. Relative paths are taken from the workspace.
	Cwd string
	// Running leaves the command running: the result says Running, and
	// later Input calls are matched against the shell rules; "C-c"
	// interrupts it with status 130.
	Running bool
	// Exit ends the session after the output, as `exit` does: the result
	// says Ended with ExitCode as the shell's status, and later calls fail
	// with SBX_ENDED.
	Exit bool
}

// Shell describes a session command (or input to a running one) as a
// scripted function sees it.
type Shell struct {
	// Text is the command, or the input typed into a running command.
	Text string
	// Input is set when Text was typed into a running command.
	Input bool
	// Cwd is the session's working directory before the command.
	Cwd string
	// Workspace is the sandbox's workspace.
	Workspace *Workspace
}

type rule[T any, R any] struct {
	m     Matcher
	f     func(context.Context, T) R
	times int // remaining uses; < 0 = unlimited
}

// Script holds the rules that answer calls. Rules are tried in the order
// they were added; the first whose matcher accepts the text answers. It
// is safe for concurrent use.
type Script struct {
	mu       sync.Mutex
	commands []*rule[Exec, Reply]
	python   []*rule[string, PythonReply]
	shells   []*rule[Shell, ShellReply]
}

func find[T, R any](mu *sync.Mutex, rules []*rule[T, R], text string) (func(context.Context, T) R, bool) {
	mu.Lock()
	defer mu.Unlock()
	for _, r := range rules {
		if r.times == 0 || !r.m.Match(text) {
			continue
		}
		if r.times > 0 {
			r.times--
		}
		return r.f, true
	}
	return nil, false
}

// Rule is a rule just added; Times limits how often it answers.
type Rule struct {
	mu    *sync.Mutex
	times *int
}

// Times makes the rule answer only the next n matching calls; later
// calls fall through to the rules after it (so a sequence of replies for
// the same command can be scripted in order).
func (r Rule) Times(n int) Rule {
	r.mu.Lock()
	*r.times = n
	r.mu.Unlock()
	return r
}

func addRule[T, R any](mu *sync.Mutex, rules *[]*rule[T, R], m Matcher, f func(context.Context, T) R) Rule {
	if m == nil {
		panic("fake: nil Matcher")
	}
	mu.Lock()
	defer mu.Unlock()
	r := &rule[T, R]{m: m, f: f, times: -1}
	*rules = append(*rules, r)
	return Rule{mu: mu, times: &r.times}
}

// Command answers commands (Commands.Run, background jobs, the
// run_command tool) that m matches with reply.
func (s *Script) Command(m Matcher, reply Reply) Rule {
	return addRule(&s.mu, &s.commands, m, func(context.Context, Exec) Reply { return reply })
}

// CommandFunc answers commands that m matches with what f returns; f may
// read and change the workspace through e.Workspace.
func (s *Script) CommandFunc(m Matcher, f func(ctx context.Context, e Exec) Reply) Rule {
	return addRule(&s.mu, &s.commands, m, f)
}

// Python answers Python cells (Python.Run, the run_python tool) whose
// code m matches.
func (s *Script) Python(m Matcher, reply PythonReply) Rule {
	return addRule(&s.mu, &s.python, m, func(context.Context, string) PythonReply { return reply })
}

// PythonFunc answers Python cells that m matches with what f returns.
func (s *Script) PythonFunc(m Matcher, f func(ctx context.Context, code string) PythonReply) Rule {
	return addRule(&s.mu, &s.python, m, f)
}

// Shell answers commands typed into bash sessions (Shell.Run, the bash
// tool) and input sent to a running one, when m matches them.
func (s *Script) Shell(m Matcher, reply ShellReply) Rule {
	return addRule(&s.mu, &s.shells, m, func(context.Context, Shell) ShellReply { return reply })
}

// ShellFunc answers session commands that m matches with what f returns.
func (s *Script) ShellFunc(m Matcher, f func(ctx context.Context, sh Shell) ShellReply) Rule {
	return addRule(&s.mu, &s.shells, m, f)
}

// unscripted explains how to script a call nothing answered.
func unscripted(kind, text string) string {
	var how string
	switch kind {
	case "command":
		how = fmt.Sprintf("fk.Script.Command(fake.Exact(%q), fake.Reply{Stdout: \"...\"})", text)
	case "python":
		how = fmt.Sprintf("fk.Script.Python(fake.Exact(%q), fake.PythonReply{Result: \"...\"})", text)
	case "shell":
		how = fmt.Sprintf("fk.Script.Shell(fake.Exact(%q), fake.ShellReply{Output: \"...\"})", text)
	}
	return fmt.Sprintf("fake sandbox: no script answers the %s %q; script it with %s (or match it with fake.Regexp / fake.Func)", kind, text, how)
}

// commandText is how a command is shown and matched: the script of
// `/bin/sh -c`, otherwise the arguments joined with spaces.
func commandText(args []string) string {
	if len(args) == 3 && args[0] == "/bin/sh" && args[1] == "-c" {
		return strings.TrimSpace(args[2])
	}
	parts := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]#~!{}") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}
