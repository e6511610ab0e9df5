package fake_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
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

// A hanging command runs into its timeout on the fake clock: a 20-minute
// timeout ends the call at once, reporting the time, and the sandbox's
// clock has moved by it.
func TestHangingCommandsTimeoutIsOnTheFakeClock(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.Command(fake.Exact("serve"), fake.Reply{Stdout: "listening\n", Hang: true})
	before := fk.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "serve", Timeout: 20 * time.Minute})
	if !errors.Is(err, sandbox.ErrTimeout) || r == nil || !r.TimedOut || r.Stdout != "listening\n" {
		t.Fatalf("Run with a 20-minute timeout: %+v %v", r, err)
	}
	if r.Duration != 20*time.Minute || r.Signal != "SIGTERM" {
		t.Errorf("the command ran %s and ended by %q, want 20m and SIGTERM", r.Duration, r.Signal)
	}
	if moved := fk.Clock.Now().Sub(before); moved != 20*time.Minute {
		t.Errorf("the clock moved %s, want 20m", moved)
	}
}

// A hanging background job runs until its timeout has passed on the fake
// clock, which Advance moves.
func TestHangingJobEndsWhenTheClockPassesItsTimeout(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.Command(fake.Exact("worker"), fake.Reply{Stdout: "working\n", Hang: true})
	ctx := context.Background()
	j, err := sb.Commands.Start(ctx, sandbox.Command{Shell: "worker", Timeout: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fk.Clock.Advance(19 * time.Minute)
	if st, err := j.Status(ctx); err != nil || !st.Running {
		t.Fatalf("after 19 minutes of a 20-minute timeout: %+v %v, want running", st, err)
	}
	fk.Clock.Advance(time.Minute)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	st, err := j.Wait(wctx)
	if err != nil || st.Running || st.Signal != "SIGTERM" {
		t.Fatalf("after its timeout passed: %+v %v, want ended by SIGTERM", st, err)
	}
	out, err := j.Output(ctx, 0)
	if err != nil || out.Data != "working\n" {
		t.Fatalf("its output: %+v %v", out, err)
	}
}

// Time passes for everything at once: a hanging command that waits for
// its own 20-minute timeout ends, on the way, a job whose ten-minute
// timeout falls due first.
func TestAHangingCommandMovesTheClockPastAJobsTimeout(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.Command(fake.Exact("worker"), fake.Reply{Hang: true})
	fk.Script.Command(fake.Exact("serve"), fake.Reply{Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := sb.Commands.Start(ctx, sandbox.Command{Shell: "worker", Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "serve", Timeout: 20 * time.Minute}); !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("the hanging command: %v", err)
	}
	st, err := j.Wait(ctx)
	if err != nil || st.Running || st.Signal != "SIGTERM" {
		t.Fatalf("the job after 20 minutes passed: %+v %v", st, err)
	}
}

// The workspace is a directory of the host, served as /workspace; the
// test's Workspace handle and the sandbox see the same files, links and
// modes, with the same confinement.
func TestWorkspaceIsAHostDirectoryShownAsWorkspace(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("platform difference (windows, symbolic links and permission bits): the host's file system has neither as Linux does")
	}
	sb, fk := fake.New(t)
	ctx := context.Background()
	info := sb.Info()
	if info.Workspace != fake.WorkspacePath || info.HostWorkspace == "" {
		t.Fatalf("Info: workspace %q on the host at %q", info.Workspace, info.HostWorkspace)
	}
	ws := fk.Workspace()
	if err := ws.WriteFile("src/run.sh", []byte("echo hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(info.HostWorkspace, "src", "run.sh")); err != nil || string(b) != "echo hi\n" {
		t.Fatalf("on the host: %q %v", b, err)
	}
	if got, err := sb.Files.ReadFile(ctx, "/workspace/src/run.sh"); err != nil || string(got) != "echo hi\n" {
		t.Fatalf("the sandbox reads %q, %v", got, err)
	}
	if m, err := ws.Mode("src/run.sh"); err != nil || m != 0o755 {
		t.Fatalf("Mode: %v %v", m, err)
	}
	if err := ws.Symlink("src/run.sh", "link"); err != nil {
		t.Fatal(err)
	}
	if err := ws.Mkdir("private"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Files.Chmod(ctx, "private", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := ws.Symlink("private", "dirlink"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{"link": 0o755, "dirlink": 0o700} {
		if m, err := ws.Mode(p); err != nil || m != want {
			t.Errorf("Mode(%s), a link: %v %v, want %v (the mode of what it leads to)", p, m, err, want)
		}
	}
	if err := ws.Symlink("/etc", "out"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.ReadFile(ctx, "out/passwd"); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Fatalf("reading through a link leading out: %v, want %s", err, sandbox.CodePathEscape)
	}
	if _, err := ws.ReadFile("../x"); sandbox.CodeOf(err) != sandbox.CodePathEscape {
		t.Fatalf("Workspace.ReadFile(../x): %v", err)
	}
	if got := strings.Join(ws.Paths(), " "); got != "dirlink link out private src src/run.sh" {
		t.Fatalf("Paths: %q", got)
	}
	if err := ws.Remove("src"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.Stat(ctx, "src/run.sh"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after Remove: %v", err)
	}
	if calls := fk.CallsOf(fake.KindFile); len(calls) != 4 {
		t.Errorf("the test's own Workspace calls were recorded: %+v", calls)
	}
}

// Commands and jobs go through the agent server's own exec code: stdin
// reaches the scripted command, its output can go to a workspace file,
// a killed job ends as a command obeying SIGTERM, and the server's checks
// (working directory, timeout bounds) answer before any rule is asked.
func TestCommandsAndJobsGoThroughTheAgentServer(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.CommandFunc(fake.Exact("cat"), func(_ context.Context, e fake.Exec) fake.Reply { return fake.Reply{Stdout: string(e.Stdin)} })
	fk.Script.Command(fake.Exact("serve"), fake.Reply{Stdout: "up\n", Hang: true})
	ctx := context.Background()
	r, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "cat", Stdin: strings.NewReader("piped in"), OutputFile: "logs/cat.txt"})
	if err != nil || r.Stdout != "piped in" {
		t.Fatalf("cat with stdin: %+v %v", r, err)
	}
	if got, err := fk.Workspace().ReadFile("logs/cat.txt"); err != nil || string(got) != "piped in" {
		t.Fatalf("the output file holds %q, %v", got, err)
	}
	if _, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "cat", Dir: "../"}); !errors.Is(err, sandbox.ErrPathEscape) {
		t.Fatalf("a working directory outside: %v", err)
	}
	j, err := sb.Commands.Start(ctx, sandbox.Command{Shell: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := j.Wait(ctx)
	if err != nil || st.Running || st.ExitCode != 143 {
		t.Fatalf("a killed job: %+v %v", st, err)
	}
	if out, err := j.Output(ctx, 0); err != nil || out.Data != "up\n" {
		t.Fatalf("its output: %+v %v", out, err)
	}
	if got := len(fk.CallsOf(fake.KindCommand)); got != 1 {
		t.Errorf("%d commands recorded, want 1 (a refused working directory runs nothing)", got)
	}
}

// WithoutBash makes the sandbox report no bash, as an image without it.
func TestWithoutBashSessionsAreUnavailable(t *testing.T) {
	sb, _ := fake.New(t, fake.WithoutBash())
	if _, err := sb.Shells.Open(context.Background(), sandbox.ShellOptions{}); sandbox.CodeOf(err) != sandbox.CodeUnavailable {
		t.Fatalf("Shells.Open without bash: %v, want %s", err, sandbox.CodeUnavailable)
	}
}
