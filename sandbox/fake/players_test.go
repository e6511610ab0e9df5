package fake_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/fake"
)

// The fake's Python kernel and bash are players of other programs'
// protocols (sandbox/pykernel's driver, bash on a terminal), not of the
// agent: everything else the fake serves is the agent server itself. These
// tests keep the players honest by making the same calls on a local
// sandbox, where the real python3 and bash answer, and comparing what a
// caller sees.

// newLocal starts a real sandbox on the local backend, or skips (fails
// where CI requires the namespace tier).
func newLocal(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)}, opts...)...)
	if err != nil {
		if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "namespace") {
			t.Fatalf("SANDBOXKIT_REQUIRE names namespace, but no local sandbox starts: %v", err)
		}
		t.Skipf("no local sandbox on this machine: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// step is one call made on both sandboxes. It returns the facts a user
// would look at (result type and fields) and the error; both must match.
type step struct {
	name string
	run  func(ctx context.Context, sb *sandbox.Sandbox) (string, error)
}

// compare runs the steps in order on the local sandbox and the fake and
// fails on any difference in facts or error code.
func compare(t *testing.T, real, fk *sandbox.Sandbox, steps []step) {
	t.Helper()
	for _, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		wantFacts, wantErr := s.run(ctx, real)
		gotFacts, gotErr := s.run(ctx, fk)
		cancel()
		if sandbox.CodeOf(gotErr) != sandbox.CodeOf(wantErr) {
			t.Errorf("%s: the fake's error is %v (code %q), the local backend's is %v (code %q)", s.name, gotErr, sandbox.CodeOf(gotErr), wantErr, sandbox.CodeOf(wantErr))
		}
		if gotFacts != wantFacts {
			t.Errorf("%s:\n fake:  %s\n local: %s", s.name, gotFacts, wantFacts)
		}
	}
}

func pyFacts(ex *sandbox.Execution) string {
	if ex == nil {
		return "<nil>"
	}
	f := fmt.Sprintf("%T stdout=%q timedout=%v exited=%v statelost=%v", ex, ex.Stdout, ex.TimedOut, ex.Exited, ex.StateLost)
	if ex.Result != nil {
		f += fmt.Sprintf(" result=%T/%s/%q", *ex.Result, ex.Result.Kind, ex.Result.Plain())
	}
	if ex.Error != nil {
		f += fmt.Sprintf(" error=%T/%s/%q", ex.Error, ex.Error.Name, ex.Error.Value)
	}
	return f
}

func py(code string, timeout time.Duration) func(context.Context, *sandbox.Sandbox) (string, error) {
	return func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
		ex, err := sb.Python.Run(ctx, code, sandbox.PythonRunOptions{Timeout: timeout})
		return pyFacts(ex), err
	}
}

func TestPythonMatchesTheLocalBackend(t *testing.T) {
	real := newLocal(t)
	if !real.Info().PythonAvailable {
		if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "python") {
			t.Fatal("SANDBOXKIT_REQUIRE names python, but the local sandbox has no python3")
		}
		t.Skip("no python3 in the local sandbox")
	}
	sb, fk := fake.New(t)
	s := fk.Script
	s.Python(fake.Exact("x = 21"), fake.PythonReply{})
	s.Python(fake.Exact("x * 2"), fake.PythonReply{Result: "42"})
	s.Python(fake.Exact(`print("hi")`), fake.PythonReply{Stdout: "hi\n"})
	s.Python(fake.Exact("1/0"), fake.PythonReply{Error: &fake.PythonError{Name: "ZeroDivisionError", Value: "division by zero"}})
	s.Python(fake.Regexp(`time\.sleep`), fake.PythonReply{Hang: true})
	s.Python(fake.Exact("x"), fake.PythonReply{Result: "21"})
	s.Python(fake.Exact("raise SystemExit(3)"), fake.PythonReply{Error: &fake.PythonError{Name: "SystemExit", Value: "3"}})
	compare(t, real, sb, []step{
		{"a statement", py("x = 21", 0)},
		{"a final expression is the result", py("x * 2", 0)},
		{"printed output", py(`print("hi")`, 0)},
		{"an exception is data", py("1/0", 0)},
		{"a cell past its timeout is interrupted", py("import time\ntime.sleep(30)", 500*time.Millisecond)},
		{"state survives the interrupt", py("x", 0)},
		{"SystemExit keeps the context", py("raise SystemExit(3)", 0)},
		{"a timeout over the maximum", py("x", 2*time.Hour)},
		{"removing a missing context", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			return "", sb.Python.Remove(ctx, "nope")
		}},
		{"creating a context twice", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			if err := sb.Python.Create(ctx, "second"); err != nil {
				return "first create", err
			}
			return "", sb.Python.Create(ctx, "second")
		}},
	})
}

// A sandbox made WithPythonImports forks its contexts from a template
// interpreter: the fake plays the template too. It used to take the
// template for an unscripted command, and every Python call then failed
// (or waited for the start timeout) in the fake while it worked on the
// local backend.
func TestPythonWithImportsMatchesTheLocalBackend(t *testing.T) {
	imports := sandbox.WithPythonImports("json")
	real := newLocal(t, imports)
	if !real.Info().PythonAvailable {
		if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "python") {
			t.Fatal("SANDBOXKIT_REQUIRE names python, but the local sandbox has no python3")
		}
		t.Skip("no python3 in the local sandbox")
	}
	sb, fk := fake.New(t, fake.WithSandboxOptions(imports))
	s := fk.Script
	s.Python(fake.Exact("x = 21"), fake.PythonReply{})
	s.Python(fake.Exact("x * 2"), fake.PythonReply{Result: "42"})
	s.Python(fake.Regexp(`time\.sleep`), fake.PythonReply{Hang: true})
	s.Python(fake.Exact("x"), fake.PythonReply{Result: "21"})
	s.Python(fake.Exact("y = 1"), fake.PythonReply{})
	ctxRun := func(name, code string) func(context.Context, *sandbox.Sandbox) (string, error) {
		return func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			if err := sb.Python.Create(ctx, name); err != nil {
				return "create", err
			}
			ex, err := sb.Python.Run(ctx, code, sandbox.PythonRunOptions{Context: name})
			return pyFacts(ex), err
		}
	}
	start := time.Now()
	compare(t, real, sb, []step{
		{"a statement", py("x = 21", 0)},
		{"a final expression is the result", py("x * 2", 0)},
		{"a cell past its timeout is interrupted", py("import time\ntime.sleep(30)", 500*time.Millisecond)},
		{"state survives the interrupt", py("x", 0)},
		{"a second context, forked too", ctxRun("second", "y = 1")},
		{"removing it", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			return "", sb.Python.Remove(ctx, "second")
		}},
		{"the first context is unharmed", py("x", 0)},
	})
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the steps took %v: a start waited for its timeout", d)
	}
	var forks int
	for _, c := range fk.Calls() {
		if c.Kind == fake.KindCommand {
			t.Errorf("the template's machinery was recorded as a command: %+v", c)
		}
		if c.Kind == fake.KindPython {
			forks++
		}
	}
	if forks != 6 {
		t.Errorf("recorded %d Python cells, want 6", forks)
	}
}

func TestPythonUnavailableMatchesAnImageWithoutPython(t *testing.T) {
	sb, _ := fake.New(t, fake.WithoutPython())
	_, err := sb.Python.Run(context.Background(), "1", sandbox.PythonRunOptions{})
	if sandbox.CodeOf(err) != sandbox.CodeUnavailable {
		t.Fatalf("Python.Run without python3: %v, want %s", err, sandbox.CodeUnavailable)
	}
}

func shellFacts(r sandbox.ShellResult, ws string) string {
	code := "nil"
	if r.ExitCode != nil {
		code = fmt.Sprint(*r.ExitCode)
	}
	cwd := strings.TrimPrefix(strings.TrimPrefix(r.Cwd, ws), "/")
	return fmt.Sprintf("%T exit=%s running=%v ended=%v cwd=%q", r, code, r.Running, r.Ended, cwd)
}

func TestShellsMatchTheLocalBackend(t *testing.T) {
	real := newLocal(t)
	if real.Info().Bash == "" {
		t.Skip("no bash in the local sandbox")
	}
	sb, fk := fake.New(t)
	s := fk.Script
	s.Shell(fake.Exact("echo hi"), fake.ShellReply{Output: "hi\n"})
	s.Shell(fake.Exact("mkdir -p sub && cd sub"), fake.ShellReply{Cwd: "sub"})
	s.Shell(fake.Exact("false"), fake.ShellReply{ExitCode: 1})
	s.Shell(fake.Exact("sleep 30"), fake.ShellReply{Running: true})
	s.Shell(fake.Exact("exit 4"), fake.ShellReply{ExitCode: 4, Exit: true})
	sessions := map[*sandbox.Sandbox]*sandbox.Shell{}
	shellRun := func(cmd string, timeout time.Duration, withOutput bool) func(context.Context, *sandbox.Sandbox) (string, error) {
		return func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			r, err := sessions[sb].Run(ctx, cmd, sandbox.ShellRunOptions{Timeout: timeout})
			f := shellFacts(r, sb.Info().Workspace)
			if withOutput {
				f += fmt.Sprintf(" output=%q", r.Output)
			}
			return f, err
		}
	}
	compare(t, real, sb, []step{
		{"open", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
			sessions[sb] = sh
			return fmt.Sprintf("%T", sh), err
		}},
		{"output and status", shellRun("echo hi", 0, true)},
		{"cd is kept", shellRun("mkdir -p sub && cd sub", 0, true)},
		{"a failing status", shellRun("false", 0, true)},
		{"a command outliving its timeout keeps running", shellRun("sleep 30", 500*time.Millisecond, false)},
		{"a new command while one runs", shellRun("echo hi", 0, false)},
		{"Ctrl-C interrupts it", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			r, err := sessions[sb].Input(ctx, "C-c", sandbox.ShellWaitOptions{Timeout: 5 * time.Second})
			return shellFacts(r, sb.Info().Workspace), err
		}},
		{"input with nothing running", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			r, err := sessions[sb].Input(ctx, "hello", sandbox.ShellWaitOptions{Timeout: time.Second})
			return shellFacts(r, sb.Info().Workspace), err
		}},
		{"a session that does not exist", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			_, err := sb.Shells.Get("sh-nope")
			return "", err
		}},
		{"a closed session", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			if err := sessions[sb].Close(); err != nil {
				return "close", err
			}
			r, err := sessions[sb].Run(ctx, "echo hi", sandbox.ShellRunOptions{})
			return shellFacts(r, sb.Info().Workspace), err
		}},
		{"exit ends a session", func(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
			sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
			if err != nil {
				return "open", err
			}
			sessions[sb] = sh
			r, err := sh.Run(ctx, "exit 4", sandbox.ShellRunOptions{})
			return shellFacts(r, sb.Info().Workspace), err
		}},
		{"a call after exit", shellRun("echo hi", 0, false)},
	})
}
