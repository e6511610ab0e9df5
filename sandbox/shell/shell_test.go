//go:build unix

// The sessions under test run on LocalStarter, which needs a Unix
// pseudo-terminal; the package's pure parts (clean_test.go) run everywhere.

package shell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testEnv is the environment of test sessions: only PATH (for python3 and
// coreutils) and HOME pointing at an empty directory, so the host's rc
// files cannot change what bash prints.
func testEnv(t testing.TB) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
}

func openTest(t testing.TB, opts Options) *Session {
	t.Helper()
	opts.Env = append(testEnv(t), opts.Env...)
	s, err := Open(context.Background(), LocalStarter, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// step is one call in a scenario and what the user must see from it.
type step struct {
	run      string        // Run this command
	input    *string       // or Input this
	typ      *string       // or Type this
	wait     bool          // or Wait
	until    bool          // with wait: keep waiting until the command is done, joining the output
	untilHas string        // with wait: keep waiting until the output contains this (or the command ends)
	timeout  time.Duration // the call's timeout (default 5 s)
	kill     bool          // RunOptions.KillOnTimeout

	out     *string        // the exact output
	has     []string       // substrings the output must contain
	hasNot  []string       // substrings it must not contain
	match   *regexp.Regexp // a pattern the output must match
	code    *int           // the exit code (nil: not checked unless running)
	running bool           // whether the command must still be running
	ended   bool           // whether the session must have ended
	killed  bool
	cwd     string // if set, the cwd after the call
	errIs   error  // the call must fail with this error
	errHas  []string
	check   func(t *testing.T, r Result) // anything else
}

func str(s string) *string { return &s }
func code(c int) *int      { return &c }
func in(s string) *string  { return &s }

func runSteps(t *testing.T, s *Session, steps []step) {
	t.Helper()
	ctx := context.Background()
	carry := ""
	for i, st := range steps {
		timeout := st.timeout
		if timeout == 0 {
			timeout = 5 * time.Second
		}
		var (
			r    Result
			err  error
			what string
		)
		switch {
		case st.input != nil:
			what = fmt.Sprintf("Input(%q)", *st.input)
			r, err = s.Input(ctx, *st.input, timeout)
		case st.typ != nil:
			what = fmt.Sprintf("Type(%q)", *st.typ)
			r, err = s.Type(ctx, *st.typ, timeout)
		case st.wait:
			what = "Wait"
			r, err = s.Wait(ctx, timeout)
			if st.untilHas != "" {
				r.Output = carry + r.Output // the text may have come with the previous step
			}
			for n := 0; (st.until || st.untilHas != "" && !strings.Contains(r.Output, st.untilHas)) && err == nil && r.Running; n++ {
				if n == 30 {
					t.Fatalf("step %d: still running after 30 waits; output %q", i, r.Output)
				}
				var more Result
				more, err = s.Wait(ctx, timeout)
				more.Output = r.Output + more.Output
				r = more
			}
		default:
			what = fmt.Sprintf("Run(%q)", st.run)
			r, err = s.Run(ctx, st.run, RunOptions{Timeout: timeout, KillOnTimeout: st.kill})
		}
		carry = r.Output
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d %s: %s\nresult: %+v (exit %s)", i, what, fmt.Sprintf(format, args...), r, showCode(r.ExitCode))
		}
		if st.errIs != nil {
			if !errors.Is(err, st.errIs) {
				fail("error %v, want %v", err, st.errIs)
			}
			for _, h := range st.errHas {
				if !strings.Contains(err.Error(), h) {
					fail("error %q does not say %q", err, h)
				}
			}
			continue
		}
		if err != nil {
			fail("unexpected error: %v", err)
		}
		if st.out != nil && r.Output != *st.out {
			fail("output %q, want %q", r.Output, *st.out)
		}
		for _, h := range st.has {
			if !strings.Contains(r.Output, h) {
				fail("output %q does not contain %q", r.Output, h)
			}
		}
		for _, h := range st.hasNot {
			if strings.Contains(r.Output, h) {
				fail("output %q contains %q", r.Output, h)
			}
		}
		if st.match != nil && !st.match.MatchString(r.Output) {
			fail("output %q does not match %v", r.Output, st.match)
		}
		if r.Running != st.running {
			fail("Running = %v, want %v", r.Running, st.running)
		}
		if r.Ended != st.ended {
			fail("Ended = %v, want %v", r.Ended, st.ended)
		}
		if r.Killed != st.killed {
			fail("Killed = %v, want %v", r.Killed, st.killed)
		}
		if r.Running != (r.ExitCode == nil) {
			fail("ExitCode must be nil exactly while running")
		}
		if st.code != nil && (r.ExitCode == nil || *r.ExitCode != *st.code) {
			fail("exit code %s, want %d", showCode(r.ExitCode), *st.code)
		}
		if st.cwd != "" && r.Cwd != st.cwd {
			fail("cwd %q, want %q", r.Cwd, st.cwd)
		}
		if st.check != nil {
			st.check(t, r)
		}
	}
}

func showCode(c *int) string {
	if c == nil {
		return "nil"
	}
	return strconv.Itoa(*c)
}

func TestSession(t *testing.T) {
	dir := t.TempDir()
	spaced := dir + "/a b"
	var bgPID int
	tests := []struct {
		name  string
		opts  Options
		steps []step
		after func(t *testing.T, s *Session)
	}{
		{name: "cd, exported and unexported variables and a function persist", steps: []step{
			{run: "cd " + dir + "; export EXP=e1; plain=p1; greet() { echo \"hi $1\"; }", out: str(""), code: code(0), cwd: dir},
			{run: "pwd; echo $EXP $plain; greet you; bash -c 'echo child sees ${EXP}-${plain-}'",
				out: str(dir + "\ne1 p1\nhi you\nchild sees e1-\n"), code: code(0), cwd: dir},
		}},
		{name: "aliases, set options, arrays and background jobs persist", steps: []step{
			{run: "alias hello='echo aliased'; set -o noglob; declare -a arr=(x y z); sleep 30 &", code: code(0)},
			{run: "hello; echo ${arr[2]}; [[ $- == *f* ]] && echo noglob-on; jobs", match: regexp.MustCompile(`^aliased\nz\nnoglob-on\n\[1\]\+ +Running +sleep 30 &\n$`), code: code(0)},
			{run: "kill %1", code: code(0)},
		}},
		{name: "exit status is data and $? carries to the next command", steps: []step{
			{run: "false", out: str(""), code: code(1)},
			{run: "echo $?", out: str("1\n"), code: code(0)},
			{run: "sh -c 'kill -9 $$'", code: code(137)},
		}},
		{name: "output is exact: blank lines, leading spaces, no trailing newline", steps: []step{
			{run: "printf '  lead\\n\\n\\n\\ttab\\n  '", out: str("  lead\n\n\n\ttab\n  "), code: code(0)},
			{run: "printf 'no newline'", out: str("no newline"), code: code(0)},
		}},
		{name: "multi-line input, heredoc, loop and continuation", steps: []step{
			{run: "for i in 1 2; do\n  echo \" $i\"\ndone\ncat <<'EOF'\n  $not_expanded\n\nEOF\necho a \\\n  b", out: str(" 1\n 2\n  $not_expanded\n\na b\n"), code: code(0)},
		}},
		{name: "comment-only, empty and blank input", steps: []step{
			{run: "# only a comment", out: str(""), code: code(0)},
			{run: "", out: str(""), code: code(0)},
			{run: "  \n\t\n", out: str(""), code: code(0)},
		}},
		{name: "quotes, backslashes, history characters and UTF-8 pass unchanged", steps: []step{
			{run: `echo "it's" 'a "b"' \\ \$HOME !! héllo €; printf '%s\n' '!x'`, out: str("it's a \"b\" \\ $HOME !! héllo €\n!x\n"), code: code(0)},
		}},
		{name: "a command longer than the terminal's line limit runs intact", steps: []step{
			{run: "cat <<'EOF'\n" + strings.Repeat("0123456789abcdef\n", 1500) + "EOF\necho done", out: str(strings.Repeat("0123456789abcdef\n", 1500) + "done\n"), code: code(0)},
		}},
		{name: "a syntax error is the shell's error and the session stays usable", steps: []step{
			{run: "(a", has: []string{"syntax error"}, code: code(2)},
			{run: "echo 'unclosed", has: []string{"unexpected EOF"}, code: code(2)},
			{run: "if true; then", has: []string{"syntax error"}, code: code(2)},
			{run: "echo fine", out: str("fine\n"), code: code(0)},
		}},
		{name: "works under set -u and set -o pipefail", steps: []step{
			{run: "set -u -o pipefail", out: str(""), code: code(0)},
			{run: "echo $undefined_var", has: []string{"unbound variable"}, code: code(1)},
			{run: "false | true", code: code(1)},
			{run: "echo ok; true | true", out: str("ok\n"), code: code(0)},
		}},
		{name: "user PS1 and PROMPT_COMMAND add no noise", steps: []step{
			{run: "PS1='my prompt$ '; PS2='more> '; PROMPT_COMMAND='echo from prompt command'", code: code(0)},
			{run: "echo x\nfor i in 1; do\necho y\ndone", out: str("x\ny\n"), code: code(0)},
			{run: "unset PROMPT_COMMAND; echo z", out: str("z\n"), code: code(0)},
			{run: "sleep 20", timeout: 300 * time.Millisecond, running: true},
			{input: in("C-c"), code: code(130)},
			{run: "echo still here", out: str("still here\n"), code: code(0)},
		}},
		{name: "exec bash keeps the session working", steps: []step{
			{run: "cd " + dir + "; x=before", code: code(0)},
			{run: "exec bash", code: code(0)},
			{run: "echo \"x=${x-gone}\"; pwd", out: str("x=gone\n" + dir + "\n"), code: code(0), cwd: dir},
			{run: "exec bash --norc --noprofile", code: code(0)},
			{run: "false", code: code(1)},
			{run: "echo $?", out: str("1\n"), code: code(0)},
		}},
		{name: "a nested interactive bash is driven like the outer one", steps: []step{
			{run: "bash", code: code(0)},
			{run: "echo level $SHLVL", out: str("level 2\n"), code: code(0)},
			{run: "exit 7", code: code(7)},
			{run: "echo level $SHLVL", out: str("level 1\n"), code: code(0)},
		}},
		{name: "cwd with spaces is reported", steps: []step{
			{run: fmt.Sprintf("mkdir -p %q && cd %q", spaced, spaced), code: code(0), cwd: spaced},
		}},
		{name: "ANSI sequences and CRLF are cleaned", steps: []step{
			{run: `printf '\033[1;32mgreen\033[0m\r\n\033]0;title\007plain\n'`, out: str("green\nplain\n"), code: code(0)},
		}},
		{name: "UTF-8 split across reads is intact, a lone lead byte becomes U+FFFD", steps: []step{
			{run: `printf 'a%.0s' {1..8191}; printf '\xe2'`, out: str(strings.Repeat("a", 8191) + "\uFFFD"), code: code(0)},
			{run: `printf 'a%.0s' {1..8191}; printf '€'`, out: str(strings.Repeat("a", 8191) + "€"), code: code(0)},
			{run: `printf '\xff\xfeok'`, out: str("\uFFFD\uFFFDok"), code: code(0)},
		}},
		{name: "50,000 lines are cut with a marker, head and tail kept", opts: Options{MaxOutputBytes: 16 << 10}, steps: []step{
			{run: "seq 50000", code: code(0), timeout: 20 * time.Second, check: func(t *testing.T, r Result) {
				if !r.Truncated || r.DroppedLines < 45000 {
					t.Fatalf("Truncated %v, dropped %d lines; want most of 50000 cut", r.Truncated, r.DroppedLines)
				}
				if !strings.HasPrefix(r.Output, "1\n2\n3\n") || !strings.HasSuffix(r.Output, "49999\n50000\n") {
					t.Fatalf("head or tail missing: %.40q ... %.40q", r.Output, r.Output[len(r.Output)-40:])
				}
				if !strings.Contains(r.Output, "lines (") || len(r.Output) > 16<<10+200 {
					t.Fatalf("no marker or over budget: %d bytes", len(r.Output))
				}
			}},
			{run: "echo small again", out: str("small again\n"), code: code(0)},
		}},
		{name: "non-interactive defaults for pagers and prompts", steps: []step{
			{run: "echo $PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT $DEBIAN_FRONTEND", out: str("cat cat 0 noninteractive\n"), code: code(0)},
		}},
		{name: "defaults can be overridden", opts: Options{Env: []string{"PAGER=less"}}, steps: []step{
			{run: "echo $PAGER $GIT_PAGER", out: str("less cat\n"), code: code(0)},
		}},
		{name: "a long command is not killed at its timeout and can be polled to the end", steps: []step{
			{run: "for i in {1..5}; do echo $i; sleep 3; done", timeout: 2500 * time.Millisecond, out: str("1\n"), running: true},
			{run: "echo refused", errIs: ErrBusy, errHas: []string{"Input", "Wait", "C-c"}},
			{wait: true, until: true, timeout: 20 * time.Second, out: str("2\n3\n4\n5\n"), code: code(0)},
			{wait: true, out: str(""), code: code(0)},
		}},
		{name: "python3 http.server in the foreground, Ctrl-C, then ls", steps: []step{
			{run: "cd " + dir + " && python3 -m http.server 8765 --bind 127.0.0.1", timeout: time.Second, running: true},
			{wait: true, untilHas: "Serving HTTP on 127.0.0.1 port 8765", timeout: time.Second, running: true},
			{input: in("C-c"), has: []string{"Keyboard interrupt"}, code: code(0)},
			{run: "ls", code: code(0)},
		}},
		{name: "read -p shows its prompt and takes the answer", steps: []step{
			{run: `read -p "Name: " n && echo "Hello $n"`, out: str("Name: "), running: true},
			{input: in("Ann"), out: str("Hello Ann\n"), code: code(0)},
		}},
		{name: "a python3 REPL is driven line by line and exited", steps: []step{
			{run: "python3 -q", has: []string{">>> "}, running: true},
			{input: in("x = 6 * 7"), running: true},
			{input: in("print(x)"), has: []string{"42"}, running: true},
			{input: in("exit()"), code: code(0)},
			{run: "echo back", out: str("back\n"), code: code(0)},
		}},
		{name: "typed text reaches the program and Ctrl-D ends its input", steps: []step{
			{run: "cat", timeout: 300 * time.Millisecond, running: true},
			{input: in("typed line"), timeout: 300 * time.Millisecond, running: true},
			{wait: true, untilHas: "typed line", timeout: 300 * time.Millisecond, running: true},
			{typ: str("par"), timeout: 200 * time.Millisecond, out: str(""), running: true},
			{typ: str("tial\n"), timeout: 200 * time.Millisecond, running: true},
			{wait: true, untilHas: "partial\n", timeout: 300 * time.Millisecond, running: true},
			{input: in("C-d"), code: code(0)},
		}},
		{name: "Ctrl-Z stops the job and returns to the shell", steps: []step{
			{run: "sleep 30", timeout: 300 * time.Millisecond, running: true},
			{input: in("C-z"), has: []string{"Stopped"}, code: code(148)},
			{run: "jobs", has: []string{"sleep 30"}, code: code(0)},
			{run: "kill -9 %1", code: code(0)},
		}},
		{name: "Ctrl-C interrupts a loop of builtins", steps: []step{
			{run: "while :; do :; done", timeout: 300 * time.Millisecond, running: true},
			{input: in("C-c"), code: code(130)},
			{run: "echo alive", out: str("alive\n"), code: code(0)},
		}},
		{name: "KillOnTimeout interrupts the command and keeps the session", steps: []step{
			{run: "echo started; sleep 30", timeout: 300 * time.Millisecond, kill: true, killed: true, has: []string{"started\n"}, code: code(130)},
			{run: "echo alive", out: str("alive\n"), code: code(0)},
		}},
		{name: "KillOnTimeout escalates to SIGKILL when signals are ignored", steps: []step{
			{run: `bash -c 'trap "" INT TERM; sleep 30'`, timeout: 300 * time.Millisecond, kill: true, killed: true, code: code(137)},
			{run: "echo alive", out: str("alive\n"), code: code(0)},
		}},
		{name: "input with no command running is refused with advice", steps: []step{
			{input: in("hello"), errIs: ErrNotRunning, errHas: []string{"Run"}},
			{run: "echo a\x00b", errIs: ErrBadInput, errHas: []string{"NUL"}},
			{run: "echo usable", out: str("usable\n"), code: code(0)},
		}},
		{name: "sleep infinity in the background, then exit 1 ends the session", steps: []step{
			{run: "sleep infinity & echo $!", code: code(0), check: func(t *testing.T, r Result) {
				// Output is the job notice "[1] PID" then the echoed PID.
				f := strings.Fields(r.Output)
				bgPID, _ = strconv.Atoi(f[len(f)-1])
			}},
			{run: "exit 1", ended: true, code: code(1)},
			{run: "echo again", errIs: ErrEnded, errHas: []string{"exited with code 1", "open a new session"}},
			{input: in("C-c"), errIs: ErrEnded},
			{wait: true, errIs: ErrEnded},
		}, after: func(t *testing.T, s *Session) {
			waitGone(t, bgPID)
		}},
		{name: "the shell being killed ends the session and says how", steps: []step{
			{run: "echo bye; kill -9 $$", ended: true, code: code(137), has: []string{"bye\n"}, check: func(t *testing.T, r Result) {
				if !strings.Contains(r.EndReason, "killed by signal 9") {
					t.Fatalf("EndReason %q does not say the shell was killed", r.EndReason)
				}
			}},
			{run: "echo again", errIs: ErrEnded, errHas: []string{"signal 9", "open a new session"}},
		}},
		{name: "set -e then false ends the session", steps: []step{
			{run: "set -e; false", ended: true, code: code(1)},
			{run: "echo again", errIs: ErrEnded, errHas: []string{"open a new session"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(tt.name, "http.server") {
				t.Parallel()
			}
			s := openTest(t, tt.opts)
			runSteps(t, s, tt.steps)
			if tt.after != nil {
				tt.after(t, s)
			}
		})
	}
}

// waitGone fails unless process pid disappears soon.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatal("no pid recorded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSessionsAreIndependent(t *testing.T) {
	t.Parallel()
	a, b := openTest(t, Options{}), openTest(t, Options{})
	runSteps(t, a, []step{{run: "secret=from-a; export EXPORTED=from-a; cd /", code: code(0)}})
	runSteps(t, b, []step{{run: "echo ${secret-unset} ${EXPORTED-unset}", out: str("unset unset\n"), code: code(0)}})
	if a.ID() == b.ID() {
		t.Fatalf("two sessions share the ID %s", a.ID())
	}
}

func TestCloseKillsEverythingItStarted(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	r, err := s.Run(context.Background(), "sleep 1000 & echo $!; (sleep 1000 & echo $!) ", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(r.Output) {
		// Skip the job notice's "[1]"; its PID is the first one echoed.
		if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("want two pids, got %q", r.Output)
	}
	// A running foreground command too.
	if r, _ := s.Run(context.Background(), "sleep 1000", RunOptions{Timeout: 200 * time.Millisecond}); !r.Running {
		t.Fatalf("sleep did not keep running: %+v", r)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, pid := range pids {
		waitGone(t, pid)
	}
	_, err = s.Run(context.Background(), "echo", RunOptions{})
	if !errors.Is(err, ErrEnded) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Run after Close: %v, want ErrEnded saying it was closed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCloseInterruptsAWaitingCall(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		s.Close()
	}()
	r, err := s.Run(context.Background(), "sleep 1000", RunOptions{Timeout: 30 * time.Second})
	if err != nil || !r.Ended {
		t.Fatalf("Run during Close: %+v, %v; want an ended result", r, err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	_, err := Open(context.Background(), LocalStarter, Options{Bash: "/nonexistent/bash", Env: testEnv(t)})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/bash") {
		t.Fatalf("Open with a missing bash: %v", err)
	}
	_, err = Open(context.Background(), LocalStarter, Options{Bash: "/bin/true", Env: testEnv(t)})
	// Depending on timing the exit is seen while waiting for start-up or
	// while sending the setup line; both must say the session ended.
	if err == nil || !(strings.Contains(err.Error(), "exited during start-up") || errors.Is(err, ErrEnded)) {
		t.Fatalf("Open with a program that exits: %v", err)
	}
	if _, err := Open(context.Background(), nil, Options{}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("Open without a Starter: %v", err)
	}
}

func TestManager(t *testing.T) {
	t.Parallel()
	m := NewManager(LocalStarter, Options{Env: testEnv(t)})
	ctx := context.Background()
	a, err := m.Open(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Open(ctx, Options{Env: []string{"ONLY_B=1"}})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, b, []step{{run: "echo ${ONLY_B-}", out: str("1\n"), code: code(0)}})
	runSteps(t, a, []step{{run: "echo ${ONLY_B-none}", out: str("none\n"), code: code(0)}})
	if got, err := m.Get(a.ID()); err != nil || got != a {
		t.Fatalf("Get(%s) = %v, %v", a.ID(), got, err)
	}
	if _, err := m.Get("sh-99"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "sh-1, sh-2") {
		t.Fatalf("Get of an unknown id: %v; want ErrNotFound listing the open sessions", err)
	}
	if _, err := b.Run(ctx, "sleep 1000", RunOptions{Timeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	list := m.List()
	if len(list) != 2 || list[0].ID != "sh-1" || list[1].ID != "sh-2" || list[0].Running || !list[1].Running || list[1].Command != "sleep 1000" {
		t.Fatalf("List = %+v", list)
	}
	if err := m.Close(a.ID()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(a.ID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Close: %v", err)
	}
	if err := m.CloseAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(ctx, "echo", RunOptions{}); !errors.Is(err, ErrEnded) {
		t.Fatalf("session after CloseAll: %v", err)
	}
	if _, err := m.Open(ctx, Options{}); !errors.Is(err, ErrEnded) {
		t.Fatalf("Open after CloseAll: %v", err)
	}
}

// BenchmarkEchoHi compares an `echo hi` round trip in a warm session with
// starting bash afresh for it, the floor this package has to beat.
func BenchmarkEchoHi(b *testing.B) {
	env := testEnv(b)
	b.Run("warm-session", func(b *testing.B) {
		s, err := Open(context.Background(), LocalStarter, Options{Env: env})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			r, err := s.Run(context.Background(), "echo hi", RunOptions{})
			if err != nil || r.Output != "hi\n" {
				b.Fatalf("%+v %v", r, err)
			}
		}
	})
	b.Run("fresh-bash-c", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command("bash", "-c", "echo hi")
			cmd.Env = env
			out, err := cmd.Output()
			if err != nil || string(out) != "hi\n" {
				b.Fatalf("%q %v", out, err)
			}
		}
	})
}
