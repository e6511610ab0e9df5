package fake_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/fake"
)

// tb is a testing.TB that keeps failures and cleanups to itself, so a test
// can check what fake.New does to the test it is given.
type tb struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	cleanups []func()
}

func (t *tb) Errorf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errors = append(t.errors, fmt.Sprintf(format, args...))
}
func (t *tb) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *tb) Helper()          {}
func (t *tb) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

func TestUnscriptedCallsNameTheCallAndHowToScriptIt(t *testing.T) {
	inner := &tb{TB: t}
	sb, _ := fake.New(inner)
	ctx := context.Background()

	_, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "make deploy"})
	if sandbox.CodeOf(err) != sandbox.CodeNotFound || !strings.Contains(err.Error(), `"make deploy"`) ||
		!strings.Contains(err.Error(), `fk.Script.Command(fake.Exact("make deploy"), fake.Reply{`) {
		t.Errorf("unscripted command: %v", err)
	}
	_, err = sb.Commands.Start(ctx, sandbox.Command{Args: []string{"serve", "--port", "8080"}})
	if sandbox.CodeOf(err) != sandbox.CodeNotFound || !strings.Contains(err.Error(), `"serve --port 8080"`) {
		t.Errorf("unscripted job: %v", err)
	}
	ex, err := sb.Python.Run(ctx, "train()", sandbox.PythonRunOptions{})
	if err != nil || ex.Error == nil || ex.Error.Name != "NotScriptedError" ||
		!strings.Contains(ex.Error.Value, `fk.Script.Python(fake.Exact("train()")`) {
		t.Errorf("unscripted Python: %+v %v", ex, err)
	}
	sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sh.Run(ctx, "git push", sandbox.ShellRunOptions{})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 127 || !strings.Contains(res.Output, `fk.Script.Shell(fake.Exact("git push")`) {
		t.Errorf("unscripted shell command: %+v %v", res, err)
	}
	if len(inner.errors) != 0 {
		t.Fatalf("the test failed before its end: %q", inner.errors)
	}
	inner.finish()
	if len(inner.errors) != 1 {
		t.Fatalf("at the end of the test: %d failures %q, want one listing the calls", len(inner.errors), inner.errors)
	}
	for _, want := range []string{"4 call(s)", "make deploy", "serve --port 8080", "train()", "git push"} {
		if !strings.Contains(inner.errors[0], want) {
			t.Errorf("the end-of-test failure lacks %q:\n%s", want, inner.errors[0])
		}
	}
	if !sb.Info().Closed {
		t.Error("the sandbox was not closed at the end of the test")
	}
}

func TestAllowUnscriptedKeepsTheTestPassing(t *testing.T) {
	inner := &tb{TB: t}
	sb, fk := fake.New(inner, fake.AllowUnscripted())
	_, err := sb.Commands.Run(context.Background(), sandbox.Command{Shell: "ls"})
	if sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("unscripted ls: %v", err)
	}
	inner.finish()
	if len(inner.errors) != 0 || len(fk.Unscripted()) != 1 {
		t.Fatalf("failures %q, unscripted %q", inner.errors, fk.Unscripted())
	}
}

func TestCallsAreRecordedWithThePolicyInForce(t *testing.T) {
	sb, fk := fake.New(t, fake.WithSandboxOptions(
		sandbox.WithLimits(sandbox.Limits{Pids: 64, MemoryBytes: 256 << 20, Timeout: 5 * time.Second}),
		sandbox.WithEnv(map[string]string{"MODE": "test"}),
	))
	fk.Script.Command(fake.Regexp(`^pytest`), fake.Reply{Stdout: "ok\n"})
	ctx := context.Background()
	if _, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "pytest -q", Dir: "src", Env: map[string]string{"CI": "1"}}); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("a command in a missing dir: %v", err)
	}
	if err := sb.Files.Mkdir(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "pytest -q", Dir: "src", Env: map[string]string{"CI": "1"}, Timeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	cmds := fk.CallsOf(fake.KindCommand)
	if len(cmds) != 1 {
		t.Fatalf("recorded commands: %+v", cmds)
	}
	c := cmds[0]
	p := c.Policy
	if c.Text != "pytest -q" || c.Dir != "src" || !c.Scripted || p.Network || p.Limits.Pids != 64 || p.Limits.MemoryBytes != 256<<20 ||
		p.Limits.Timeout != 5*time.Second || p.Timeout != 2*time.Second || p.Isolation != sandbox.TierNone {
		t.Errorf("recorded %+v", c)
	}
	env := strings.Join(p.Env, " ")
	if !strings.Contains(env, "MODE=test") || !strings.Contains(env, "CI=1") || !strings.Contains(env, "HOME=/workspace") {
		t.Errorf("recorded environment %q", env)
	}
	files := fk.CallsOf(fake.KindFile)
	if len(files) != 1 || files[0].Op != "fs.mkdir" || files[0].Text != "src" {
		t.Errorf("recorded file calls %+v", files)
	}

	sbNet, fkNet := fake.New(t, fake.WithSandboxOptions(sandbox.WithNetwork()))
	fkNet.Script.Command(fake.Exact("curl example.test"), fake.Reply{})
	if _, err := sbNet.Commands.Run(ctx, sandbox.Command{Shell: "curl example.test"}); err != nil {
		t.Fatal(err)
	}
	if got := fkNet.CallsOf(fake.KindCommand); len(got) != 1 || !got[0].Policy.Network || !sbNet.Info().Network {
		t.Errorf("a sandbox with network: recorded %+v", got)
	}
}

func TestRequiredTierIsRefusedUnlessReported(t *testing.T) {
	inner := &tb{TB: t}
	fatal := make(chan string, 1)
	func() {
		defer func() { recover() }()
		ftb := &fatalTB{tb: inner, fatal: fatal}
		fake.New(ftb, fake.WithSandboxOptions(sandbox.RequireIsolation(sandbox.TierNamespace)))
	}()
	select {
	case msg := <-fatal:
		if !strings.Contains(msg, string(sandbox.CodeIsolationUnavailable)) || !strings.Contains(msg, "fake.ReportTier") {
			t.Errorf("fake.New with a required tier: %s", msg)
		}
	default:
		t.Error("fake.New accepted RequireIsolation(namespace) without ReportTier")
	}
	sb, _ := fake.New(t, fake.ReportTier(sandbox.TierNamespace), fake.WithSandboxOptions(sandbox.RequireIsolation(sandbox.TierNamespace)))
	if sb.Info().Isolation != sandbox.TierNamespace {
		t.Errorf("reported tier %v", sb.Info().Isolation)
	}
}

type fatalTB struct {
	*tb
	fatal chan string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.fatal <- fmt.Sprintf(format, args...)
	panic("fatal")
}

func TestScriptRulesInOrderAndTimes(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.Command(fake.Exact("date"), fake.Reply{Stdout: "first\n"}).Times(1)
	fk.Script.Command(fake.Regexp(`^da`), fake.Reply{Stdout: "later\n"})
	fk.Script.Command(fake.Func("anything", func(string) bool { return true }), fake.Reply{Stdout: "fallback\n"})
	ctx := context.Background()
	var got []string
	for _, c := range []string{"date", "date", "ls"} {
		r, err := sb.Commands.Run(ctx, sandbox.Command{Shell: c})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.TrimSpace(r.Stdout))
	}
	if strings.Join(got, ",") != "first,later,fallback" {
		t.Fatalf("answers %q", got)
	}
}

func TestHangingCommandEndsAtItsTimeoutOrCancellation(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.Command(fake.Exact("serve"), fake.Reply{Stdout: "listening\n", Hang: true})
	r, err := sb.Commands.Run(context.Background(), sandbox.Command{Shell: "serve", Timeout: 100 * time.Millisecond})
	if !errors.Is(err, sandbox.ErrTimeout) || r == nil || !r.TimedOut || r.Stdout != "listening\n" {
		t.Fatalf("Run past its timeout: %+v %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = sb.Commands.Run(ctx, sandbox.Command{Shell: "serve"})
	if !errors.Is(err, sandbox.ErrTimeout) && !errors.Is(err, sandbox.ErrCanceled) {
		t.Fatalf("Run with a cancelled context: %v", err)
	}
	// The sandbox is still usable.
	if _, err := sb.Commands.Run(context.Background(), sandbox.Command{Shell: "serve", Timeout: 10 * time.Millisecond}); !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("after the cancellation: %v", err)
	}
}

func TestOutputOverTheLimitIsCutLikeTheAgentCutsIt(t *testing.T) {
	sb, fk := fake.New(t, fake.WithSandboxOptions(sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: 100})))
	fk.Script.Command(fake.Exact("yes"), fake.Reply{Stdout: strings.Repeat("y\n", 500)})
	r, err := sb.Commands.Run(context.Background(), sandbox.Command{Shell: "yes"})
	if err != nil || r.StdoutDropped != 900 || !strings.Contains(r.Stdout, "900 bytes of stdout cut here") || !strings.HasPrefix(r.Stdout, "y\ny\n") {
		t.Fatalf("Run: dropped %d, stdout %q, %v", r.StdoutDropped, r.Stdout, err)
	}
}

func TestWorkspaceQuotaFromTheLimits(t *testing.T) {
	sb, _ := fake.New(t, fake.WithSandboxOptions(sandbox.WithLimits(sandbox.Limits{FileSizeBytes: 10, DiskBytes: 15})))
	ctx := context.Background()
	if err := sb.Files.Write(ctx, "a", []byte("0123456789"), 0); err != nil {
		t.Fatal(err)
	}
	if err := sb.Files.Write(ctx, "b", []byte("0123456789x"), 0); !errors.Is(err, sandbox.ErrQuota) {
		t.Fatalf("a file over the size limit: %v", err)
	}
	if err := sb.Files.Write(ctx, "c", []byte("012345"), 0); !errors.Is(err, sandbox.ErrQuota) {
		t.Fatalf("a write past the disk quota: %v", err)
	}
	if err := sb.Files.Write(ctx, "a", []byte("01234567"), 0); err != nil {
		t.Fatalf("a rewrite within the quota: %v", err)
	}
}

func TestShellCommandsArriveVerbatim(t *testing.T) {
	sb, fk := fake.New(t)
	long := "echo " + strings.Repeat("abc'\\\"$ ", 600) // past the terminal's line limit: sent in pieces
	odd := "printf '%s\\n' \"héllo\" 'it''s' !x\ncat <<EOF\n\ttab\nEOF"
	var seen []string
	fk.Script.ShellFunc(fake.Func("any", func(string) bool { return true }), func(_ context.Context, s fake.Shell) fake.ShellReply {
		seen = append(seen, s.Text)
		return fake.ShellReply{Output: "ok\n"}
	})
	sh, err := sb.Shells.Open(context.Background(), sandbox.ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{long, odd} {
		r, err := sh.Run(context.Background(), c, sandbox.ShellRunOptions{})
		if err != nil || r.Output != "ok\n" {
			t.Fatalf("Run: %+v %v", r, err)
		}
	}
	if len(seen) != 2 || seen[0] != long || seen[1] != odd {
		t.Fatalf("the script saw %q", seen)
	}
}

func TestShellExitEndsTheSession(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.Shell(fake.Exact("exit 4"), fake.ShellReply{Output: "bye\n", ExitCode: 4, Exit: true})
	sh, err := sb.Shells.Open(context.Background(), sandbox.ShellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sh.Run(context.Background(), "exit 4", sandbox.ShellRunOptions{})
	if err != nil || !r.Ended || r.ExitCode == nil || *r.ExitCode != 4 {
		t.Fatalf("exit: %+v %v", r, err)
	}
	if _, err := sh.Run(context.Background(), "exit 4", sandbox.ShellRunOptions{}); !errors.Is(err, &sandbox.Error{Code: sandbox.CodeEnded}) {
		t.Fatalf("a call after exit: %v", err)
	}
}

func TestCopyOfTheWorkspaceIntoItselfIsRefused(t *testing.T) {
	sb, _ := fake.New(t)
	ctx := context.Background()
	if err := sb.Files.Write(ctx, "a.txt", []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := sb.Files.Copy(ctx, "", "sub", sandbox.CopyOptions{}); !errors.Is(err, sandbox.ErrInvalidArgument) {
		t.Fatalf("Copy of the workspace into sub: %v", err)
	}
}
