package sandboxtest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Search under hostile input (issue 17), part of the Files group: a search
// is linear in its input for every pattern (RE2 semantics allow it),
// matches within one line, and stops, agent included, when its caller
// gives up.

// testSearchHostilePatterns runs the searches that ran for minutes when a
// pattern starting with a literal was retried at every occurrence of it
// (occurrences × line length): each must complete, with the right line,
// well inside a deadline that a quadratic search cannot meet. The assertion
// is completion, not speed: grep takes milliseconds on the same input.
func testSearchHostilePatterns(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	jsonURLs := strings.Repeat(`{"u":"http://example.com/i.jpg"},`, (1<<20)/32)
	cases := []struct {
		name, pattern, line1, line2 string
	}{
		// 300 KB of "a" ending in "b": `a+$` fails at every "a".
		{"a-plus-dollar.txt", `a+$`, strings.Repeat("a", 300<<10) + "b", "aaa"},
		// 1 MB of minified JSON full of URLs, none ending the line in .png.
		{"minified.json", `http.*\.png$`, "[" + jsonURLs + "]", `see http://example.com/logo.png`},
		// 1 MB of "a": the nested repetition that takes a backtracking
		// engine forever (the 5 MB line; at 1 MB a quadratic
		// search is already 5×10^11 steps, and a linear one stays quick
		// in a -race build on a loaded machine).
		{"nested.txt", `(a+)+$`, strings.Repeat("a", 1<<20) + "!", "a"},
	}
	for _, c := range cases {
		b.write(c.name, c.line1+"\n"+c.line2+"\n")
	}
	for _, c := range cases {
		// Generous for -race builds on a loaded machine; a quadratic
		// search would need hours.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := b.sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: c.pattern, Path: c.name})
		cancel()
		if err != nil {
			t.Fatalf("search %q over %s (a line of %d bytes) did not complete: %v", c.pattern, c.name, len(c.line1), err)
		}
		if len(res.Matches) != 1 || res.Matches[0].Line != 2 || res.Matches[0].Text != c.line2 {
			t.Fatalf("search %q over %s found %+v, want line 2 (%q) only", c.pattern, c.name, res.Matches, c.line2)
		}
	}
	b.usable()
}

// testSearchWithinOneLine: search matches line by line, as documented and
// as grep does. A pattern that can match a newline (\s, [^x]) never
// matches across lines, and one that must contain a newline is refused
// with a message saying how to anchor at the end of a line instead.
func testSearchWithinOneLine(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.write("two.txt", "foo\nbar\nfoo bar\nx\n")
	res, err := b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: `foo\s+bar`})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != 1 || res.Matches[0].Line != 3 {
		t.Fatalf(`search "foo\s+bar" found %+v, want line 3 only (not foo and bar on lines 1-2)`, res.Matches)
	}
	res, err = b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: `bar[^y]x`})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != 0 {
		t.Fatalf(`search "bar[^y]x" matched across a newline: %+v`, res.Matches)
	}
	_, err = b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: `foo\nbar`})
	wantCode(t, `search for "foo\nbar"`, err, sandbox.CodeInvalidArgument)
	wantMessage(t, `search for "foo\nbar"`, err, "one line", "$")
	b.usable()
}

// testSearchCancel starts a search with a legitimately large amount of
// work (an expensive pattern over megabytes), gives up on it, and checks
// that the call returns at once with the caller's code and that the agent
// stops working: a search used to check for cancellation only between
// files, and kept a CPU busy after the caller's deadline.
func testSearchCancel(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// 6 MiB of lines of a's and b's in a pseudo-random order:
	// `[ab]*a[ab]{20}[^ab]` is expensive for every engine (an automaton
	// needs a state per combination of the last 21 letters, an NFA a
	// thread per letter), and no literal rules a line out. (The pattern
	// used before, `[a-y]{200}z` over lowercase lines, is over at once
	// now: no line holds the "z" the search looks for first.)
	text := make([]byte, 6<<20)
	x := uint32(1)
	for i := range text {
		x = x*1664525 + 1013904223
		text[i] = "ab"[x>>31]
		if i%1001 == 1000 {
			text[i] = '\n'
		}
	}
	b.write("big.txt", string(text))
	pattern := `[ab]*a[ab]{20}[^ab]`
	for _, how := range []string{"cancel", "deadline"} {
		var ctx context.Context
		var cancel context.CancelFunc
		if how == "cancel" {
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
		} else {
			ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		}
		done := make(chan error, 1)
		go func() {
			_, err := b.sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: pattern})
			done <- err
		}()
		select {
		case err := <-done:
			want := sandbox.CodeCanceled
			if how == "deadline" {
				want = sandbox.CodeTimeout
			}
			if err == nil {
				t.Skipf("the search finished within 300 ms on this backend: nothing left to cancel")
			}
			wantCode(t, "a search the caller gave up ("+how+")", err, want)
		case <-time.After(20 * time.Second):
			t.Fatalf("a search whose caller gave up (%s) does not return", how)
		}
		cancel()
		if pid := b.agentPIDOrZero(); pid > 0 {
			agentIdle(t, pid, "after the caller gave up on a search ("+how+")")
		}
	}
	b.usable()
}

// agentIdle fails unless the process pid uses under a third of a CPU over
// two seconds, after two grace seconds for work to notice it should stop:
// an agent still searching uses all of one.
func agentIdle(t *testing.T, pid int, when string) {
	t.Helper()
	time.Sleep(2 * time.Second)
	before, err := cpuTime(pid)
	if err != nil {
		t.Fatalf("reading the agent's CPU time: %v", err)
	}
	const window = 2 * time.Second
	time.Sleep(window)
	after, err := cpuTime(pid)
	if err != nil {
		t.Fatalf("reading the agent's CPU time: %v", err)
	}
	if used := after - before; used > window/3 {
		t.Fatalf("the agent used %v of CPU in %v %s: it is still working", used, window, when)
	}
}

// cpuTime returns the user and system CPU time of a process, its threads
// included, from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields are counted from
	// the last ")".
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100
	// on Linux).
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed /proc stat times")
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// testSearchAtMinOpenFiles: a search never loses files for want of
// descriptors. Found in review (R8): the engine held a descriptor per
// directory of a deep tree, the agent (under the sandbox's RLIMIT_NOFILE)
// ran out, and the directories and files it could not open were passed
// over as unreadable — at Limits.OpenFiles = MinOpenFiles one search
// returned 94 of 200 matches, and three at once 123, 90 and an internal
// error, each with Truncated false. Each search must find every match, or
// fail with a coded error the caller can act on (BUSY: retry); a short
// result that says it is complete is the one wrong answer.
func testSearchAtMinOpenFiles(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{OpenFiles: sandbox.MinOpenFiles}))
	// A chain of 100 nested directories with two matching files at each
	// level: a walk that holds on to a directory while it is below it
	// holds 100 descriptors.
	const depth = 100
	for i, p := 0, "tree"; i < depth; i, p = i+1, p+"/d" {
		b.write(p+"/a.txt", "needle\n")
		b.write(p+"/z.txt", "needle\n")
	}
	for _, n := range []int{1, 3} {
		errs := make([]error, n)
		got := make([]*sandbox.SearchResult, n)
		var wg sync.WaitGroup
		for k := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[k], errs[k] = b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: "needle", Path: "tree", MaxResults: 10 * depth})
			}()
		}
		wg.Wait()
		for k := range n {
			switch {
			case errs[k] != nil:
				wantCode(t, "a search at MinOpenFiles", errs[k], sandbox.CodeBusy)
				if !strings.Contains(errs[k].Error(), "open files") {
					t.Errorf("a search out of descriptors says %q; want it to say the sandbox has too many open files", errs[k])
				}
			case len(got[k].Matches) != 2*depth || got[k].Files != 2*depth || got[k].Truncated:
				t.Errorf("search %d of %d at once, Limits.OpenFiles=%d: %d matches in %d files, truncated %v; want %d in %d (or a BUSY error)",
					k+1, n, sandbox.MinOpenFiles, len(got[k].Matches), got[k].Files, got[k].Truncated, 2*depth, 2*depth)
			}
		}
	}
	b.usable()
}
