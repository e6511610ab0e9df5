package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// binary is the sandboxkit command built once for the package's tests: the
// tests drive the real program through its command line, its pipes and its
// exit codes, as a user or an MCP client does.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxkit-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sandboxkit")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	build := exec.Command(gobin, "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sandboxkit:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireOrSkip skips, unless SANDBOXKIT_REQUIRE names what is missing (as
// CI sets it): there the missing piece is a failure, not a skip.
func requireOrSkip(t testing.TB, what, reason string) {
	t.Helper()
	sandboxtest.Unavailable(t, what, reason)
}

var (
	isolationOnce sync.Once
	strictOK      bool
	doctorOutput  string
)

// isolationFlags returns the flags that let the binary create sandboxes on
// this machine: none when `sandboxkit doctor` says the default (strict,
// namespace tier) works; otherwise the weaker tiers by name, unless
// SANDBOXKIT_REQUIRE names namespace, where the test fails instead.
func isolationFlags(t testing.TB) []string {
	t.Helper()
	isolationOnce.Do(func() {
		out, err := exec.Command(binary, "doctor").CombinedOutput()
		strictOK, doctorOutput = err == nil, string(out)
	})
	if strictOK {
		return nil
	}
	if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "namespace") {
		t.Fatalf("SANDBOXKIT_REQUIRE has namespace but sandboxkit doctor fails:\n%s", doctorOutput)
	}
	return []string{"--allow-weaker", "landlock,process"}
}

// result is what one run of the binary did.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs sandboxkit with args and stdin, and returns its exit code
// and output. It fails the test when the binary cannot be run or does not
// end within the test's own bound.
func runBinary(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sandboxkit %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return result{code, stdout.String(), stderr.String()}
}

// lineLog collects a subprocess's stderr line by line, for waiting on a
// log line and for showing the log when a test fails.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced on every new line
	done  chan struct{} // closed at EOF
}

func newLineLog(r io.Reader) *lineLog {
	l := &lineLog{added: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			close(l.added)
			l.added = make(chan struct{})
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// wait returns the first line, from the start, for which match returns
// true, waiting for it until ctx is done or the stream ends.
func (l *lineLog) wait(ctx context.Context, match func(string) bool) (string, error) {
	for i := 0; ; {
		l.mu.Lock()
		for ; i < len(l.lines); i++ {
			if match(l.lines[i]) {
				line := l.lines[i]
				l.mu.Unlock()
				return line, nil
			}
		}
		added := l.added
		l.mu.Unlock()
		select {
		case <-added:
		case <-l.done:
			l.mu.Lock()
			more := i < len(l.lines)
			l.mu.Unlock()
			if !more {
				return "", io.EOF
			}
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// all returns every line for which match returns true.
func (l *lineLog) all(match func(string) bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// logValue returns the value of key in a log/slog text line ("" if absent).
func logValue(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if end := strings.Index(v[1:], `"`); end >= 0 {
			return v[1 : end+1]
		}
	}
	if end := strings.IndexByte(v, ' '); end >= 0 {
		v = v[:end]
	}
	return v
}
