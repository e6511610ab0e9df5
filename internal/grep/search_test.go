package grep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/internal/rgtest"
)

// reference is the plain definition of Search: fs.WalkDir's order, each
// text file split into lines and each line matched on its own, binary
// files (a NUL in the first 8000 bytes) counted when a line matches.
func reference(t testing.TB, fsys fs.FS, root string, ref *regexp.Regexp, maxLine int) *Result {
	t.Helper()
	res := &Result{Matches: []Match{}}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		res.Files++
		text := string(data)
		binary := strings.IndexByte(text[:min(len(text), 8000)], 0) >= 0
		found := false
		for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if text == "" || !ref.MatchString(line) {
				continue
			}
			found = true
			if binary {
				break
			}
			line = strings.TrimSuffix(line, "\r")
			if maxLine > 0 && len(line) > maxLine {
				line = line[:maxLine]
				for len(line) > 0 && !utf8.ValidString(line[max(0, len(line)-3):]) {
					line = line[:len(line)-1]
				}
			}
			m := Match{Path: p, Line: i + 1, Text: line}
			if !utf8.ValidString(line) {
				m.Text, m.InvalidUTF8 = strings.ToValidUTF8(line, "\uFFFD"), true
			}
			res.Matches = append(res.Matches, m)
		}
		if binary && found {
			res.SkippedBinary++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// corpus writes a tree whose names sort differently by whole path and by
// component (walk order: "a/x" before "a.b"), with binary files, CRLF,
// invalid UTF-8, a long line, an empty file and one without a final
// newline.
func corpus(t testing.TB) string {
	dir := t.TempDir()
	files := map[string]string{
		"a/x.go":        "package a\nfunc NewReader() {}\n// TODO(x): later\n",
		"a.b":           "func NewBufferedReader(x int)\r\nTODO fixme\r\n",
		"a-b/y.txt":     "colour color\nkelvin \u212Aelvin\n",
		"a0":            "caf\xc3\xa9 \xff\xfe Reader(\n",
		"bin/blob":      "func New\x00Reader\nfunc NewXReader\n",
		"bin/late":      strings.Repeat("x", 9000) + "\x00func NewZReader\n",
		"deep/1/2/3/z":  "no newline at the end: func NewQReader",
		"empty":         "",
		"long.txt":      strings.Repeat("é", 400) + " func NewLongReader\n",
		"Upper/Case.md": "FIXME: NewReader\n",
	}
	for p, s := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A link to a file outside: not followed below the root.
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("func NewSecretReader\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSearchAgreesWithReference compares Search with the reference on the
// corpus (and on part of the Go source tree, when there is one) for
// patterns with and without literals, with 1, 2 and 8 workers.
func TestSearchAgreesWithReference(t *testing.T) {
	roots := []string{corpus(t)}
	for _, sub := range []string{"/usr/local/go/src/bufio", "/usr/local/go/src/regexp", "/usr/local/go/src/strings"} {
		if _, err := os.Stat(sub); err == nil {
			roots = append(roots, sub)
		}
	}
	patterns := []string{`func New[A-Z]\w*Reader`, `\w+Reader\(`, `(?i)newreader`, `TODO|FIXME`, `(?i)kelvin`,
		`colou?r`, `^$`, `[a-z]+\.[A-Z]\w+\(`, `\x{FFFD}`, `\s+$`}
	for _, root := range roots {
		fsys := os.DirFS(root).(fs.ReadDirFS)
		for _, p := range patterns {
			m, err := Compile(p, false)
			if err != nil {
				t.Fatal(err)
			}
			want := reference(t, fsys, ".", regexp.MustCompile("(?m)"+p), 100)
			for _, workers := range []int{1, 2, 8} {
				got, err := Search(t.Context(), fsys, ".", m, Options{Workers: workers, MaxLineBytes: 100})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: Search(%q) with %d workers:\n got %d matches, %d files, %d binary: %+v\nwant %d matches, %d files, %d binary: %+v",
						root, p, workers, len(got.Matches), got.Files, got.SkippedBinary, head(got.Matches), len(want.Matches), want.Files, want.SkippedBinary, head(want.Matches))
				}
			}
		}
	}
}

func head(m []Match) []Match { return m[:min(len(m), 8)] }

// MaxResults keeps the first matches in walk order, whatever the workers'
// timing, and says the result was cut; a result exactly at the limit with
// nothing left unread is not cut.
func TestSearchMaxResultsKeepsTheFirst(t *testing.T) {
	dir := t.TempDir()
	for i := range 200 {
		name := filepath.Join(dir, strconv.Itoa(i%7), strconv.Itoa(i)+".txt")
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(strings.Repeat("needle\nhay\n", i%3+1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys := os.DirFS(dir).(fs.ReadDirFS)
	m, err := Compile("needle", false)
	if err != nil {
		t.Fatal(err)
	}
	all, err := Search(t.Context(), fsys, ".", m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 67*1 + 67*2 + 66*3 // files with one, two, three needles
	if all.Truncated || len(all.Matches) != n {
		t.Fatalf("no limit: %d matches, truncated %v; want %d, not truncated", len(all.Matches), all.Truncated, n)
	}
	for _, limit := range []int{1, 2, 57, n - 1} {
		for range 10 {
			got, err := Search(t.Context(), fsys, ".", m, Options{MaxResults: limit, Workers: 4})
			if err != nil {
				t.Fatal(err)
			}
			if !got.Truncated || !reflect.DeepEqual(got.Matches, all.Matches[:limit]) {
				t.Fatalf("MaxResults %d: truncated %v, %d matches, first %+v; want the first %d in order, truncated",
					limit, got.Truncated, len(got.Matches), head(got.Matches), limit)
			}
		}
	}
	got, err := Search(t.Context(), fsys, ".", m, Options{MaxResults: n})
	if err != nil || !reflect.DeepEqual(got.Matches, all.Matches) {
		t.Fatalf("MaxResults %d with %d matches: %d, %v; want all", n, n, len(got.Matches), err)
	}
}

// The root may be a file; a missing root is an error that says so; a
// file over MaxFileSize is counted and not read; SkipDir and Select leave
// out what they name.
func TestSearchRootsAndSelection(t *testing.T) {
	dir := corpus(t)
	fsys := os.DirFS(dir).(fs.ReadDirFS)
	m, err := Compile("NewReader", false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Search(t.Context(), fsys, "a/x.go", m, Options{})
	if err != nil || len(got.Matches) != 1 || got.Matches[0].Path != "a/x.go" || got.Files != 1 {
		t.Fatalf("a file as the root: %+v, %v", got, err)
	}
	if _, err := Search(t.Context(), fsys, "nothing/here", m, Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing root: %v, want fs.ErrNotExist", err)
	}
	got, err = Search(t.Context(), fsys, ".", m, Options{
		MaxFileSize: 40,
		SkipDir:     func(p string, d fs.DirEntry) bool { return d.Name() == "Upper" },
		Select:      func(p, name string) bool { return !strings.HasSuffix(name, ".b") },
	})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, mt := range got.Matches {
		paths = append(paths, mt.Path)
	}
	// a/x.go is 47 bytes (over 40); Upper is skipped; a.b not selected.
	if len(paths) != 0 || got.Files != 8 {
		t.Fatalf("with a size limit, a skipped folder and a filter: matches in %q, %d files; want none, 8 files", paths, got.Files)
	}
}

// A search whose context ends returns the context's error promptly, even
// inside one long expensive file.
func TestSearchStopsWhenCancelled(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), abLines(4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	// Expensive for every engine: an automaton needs a state for each
	// combination of the last 21 letters, an NFA a thread for each.
	m, err := Compile(`[ab]*a[ab]{20}[^ab]`, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Search(ctx, os.DirFS(dir).(fs.ReadDirFS), ".", m, Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Skipf("the search finished before its deadline (%v): nothing to cancel", err)
	}
	// Generous: the budget is milliseconds; a search that does not stop
	// inside the file takes seconds (minutes under -race).
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a search cancelled after 50 ms returned after %v", d)
	}
}

// abLines is n bytes of lines of 1000 a's and b's in a pseudo-random order.
func abLines(n int) []byte {
	b := make([]byte, n)
	x := uint32(1)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = "ab"[x>>31]
		if i%1001 == 1000 {
			b[i] = '\n'
		}
	}
	return b
}

// BenchmarkSearchGoSrc is the engine over the Go source tree (os.DirFS,
// no sandbox) against ripgrep with the same pattern, alternating, in the
// same run; it reports both medians, the ratio, and the CPU time each
// used (on a loaded machine, the comparison of work):
//
//	go test -run '^$' -bench SearchGoSrc -count 5 ./internal/grep
func BenchmarkSearchGoSrc(b *testing.B) {
	const root = "/usr/local/go/src"
	if _, err := os.Stat(root); err != nil {
		b.Skip("no Go source tree at", root)
	}
	rg, _ := exec.LookPath("rg")
	fsys := os.DirFS(root).(fs.ReadDirFS)
	for _, c := range []struct {
		name, pattern string
		fold          bool
	}{
		{"literal-prefix", `func New[A-Z]\w*Reader`, false},
		{"inner-literal", `\w+Reader\(`, false},
		{"ignore-case", `newreader`, true},
		{"alternation", `TODO|FIXME`, false},
		{"digit-class", `[A-Z]{4}[0-9]+\b`, false},
		{"no-literal", `[A-Z][a-z]+[A-Z]{3}\b`, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			m, err := Compile(c.pattern, c.fold)
			if err != nil {
				b.Fatal(err)
			}
			if rg != "" {
				agreeWithRipgrep(b, rg, fsys, root, m, c.pattern, c.fold)
			}
			var ours, theirs, oursCPU, theirsCPU []time.Duration
			for b.Loop() {
				t0, c0 := time.Now(), cpuTime()
				res, err := Search(context.Background(), fsys, ".", m, Options{MaxFileSize: 32 << 20, MaxLineBytes: 500})
				if err != nil || len(res.Matches) == 0 {
					b.Fatalf("%d matches, %v", len(res.Matches), err)
				}
				ours, oursCPU = append(ours, time.Since(t0)), append(oursCPU, cpuTime()-c0)
				if rg != "" {
					args := []string{"-n", c.pattern, root}
					if c.fold {
						args = append([]string{"-i"}, args...)
					}
					cmd := exec.Command(rg, args...)
					t0 = time.Now()
					out, err := cmd.Output()
					if err != nil || !bytes.Contains(out, []byte(":")) {
						b.Fatalf("rg: %v", err)
					}
					theirs = append(theirs, time.Since(t0))
					theirsCPU = append(theirsCPU, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
				}
			}
			med := func(d []time.Duration) float64 { s := slices.Clone(d); slices.Sort(s); return float64(s[len(s)/2]) }
			b.ReportMetric(med(ours)/1e6, "grep-ms")
			b.ReportMetric(med(oursCPU)/1e6, "grep-cpu-ms")
			if len(theirs) > 0 {
				b.ReportMetric(med(theirs)/1e6, "rg-ms")
				b.ReportMetric(med(theirsCPU)/1e6, "rg-cpu-ms")
				b.ReportMetric(med(ours)/med(theirs), "x-rg")
			}
		})
	}
}

// agreeWithRipgrep fails the benchmark unless Search finds the lines
// (path and line number) that ripgrep finds when it also reads hidden and
// ignored files, as Search does: a faster search that finds fewer lines
// would be no win. (Timed, ripgrep runs with its defaults: less work.)
func agreeWithRipgrep(b *testing.B, rg string, fsys fs.ReadDirFS, root string, m *Matcher, pattern string, fold bool) {
	want, err := rgtest.Lines(rg, root, pattern, fold)
	if err != nil {
		b.Fatal(err)
	}
	var got []string
	res, err := Search(context.Background(), fsys, ".", m, Options{MaxFileSize: 32 << 20, MaxLineBytes: 500})
	if err != nil {
		b.Fatal(err)
	}
	for _, mt := range res.Matches {
		got = append(got, rgtest.Entry(mt.Path, mt.Line))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		b.Fatalf("%q: Search found %d lines, ripgrep %d: %q... and %q...", pattern, len(got), len(want), head2(got), head2(want))
	}
}

func head2(s []string) []string { return s[:min(len(s), 8)] }

// eofReads is an fs.ReadDirFS whose files say io.EOF with their last
// bytes, as the agent's do (a short read ends a regular file), where
// os.DirFS's say it with a read of its own.
type eofReads struct{ fs.ReadDirFS }

func (e eofReads) Open(name string) (fs.File, error) {
	f, err := e.ReadDirFS.Open(name)
	if err != nil {
		return nil, err
	}
	return eofFile{f}, nil
}

type eofFile struct{ fs.File }

func (f eofFile) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.File, p)
	if err == io.ErrUnexpectedEOF || (err == nil && n < len(p)) {
		err = io.EOF
	}
	return n, err
}

// Files are read whole whatever their size against the read buffer (64
// KiB at first, kept between files and searches): a file is read without
// a Stat until it fills the buffer, then grown to its size. The match on
// each file's last line is found, at its line number, for files that end
// just below, at and above the buffer's size and far beyond it, with the
// end of the file said by a read of its own or with the last bytes; and
// MaxFileSize still leaves out exactly the files above it.
func TestSearchReadsFilesWhole(t *testing.T) {
	dir := t.TempDir()
	sizes := []int{40, 64<<10 - 1, 64 << 10, 64<<10 + 1, 200_000, 1<<20 + 3, 5_000}
	for i, size := range sizes {
		last := "\nfunc NewEndReader"
		body := strings.Repeat(strings.Repeat("x", 99)+"\n", size/100+1)[:size-len(last)] + last
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Compile(`func New\w*Reader`, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, fsys := range []fs.ReadDirFS{os.DirFS(dir).(fs.ReadDirFS), eofReads{os.DirFS(dir).(fs.ReadDirFS)}} {
		for _, limit := range []int64{0, 100_000} {
			got, err := Search(t.Context(), fsys, ".", m, Options{Workers: 1, MaxFileSize: limit})
			if err != nil {
				t.Fatal(err)
			}
			var want []Match
			for i, size := range sizes {
				if limit > 0 && int64(size) > limit {
					continue
				}
				want = append(want, Match{Path: fmt.Sprintf("f%d", i), Line: (size-len("\nfunc NewEndReader"))/100 + 2, Text: "func NewEndReader"})
			}
			slices.SortFunc(want, func(a, b Match) int { return strings.Compare(a.Path, b.Path) })
			if !reflect.DeepEqual(got.Matches, want) || got.Files != len(sizes) {
				t.Fatalf("%T, MaxFileSize %d: %d files, matches %+v; want %d files, %+v", fsys, limit, got.Files, got.Matches, len(sizes), want)
			}
		}
	}
}

// scarceFS is an fs.ReadDirFS that runs out of descriptors: an open or a
// listing for which short(op, name) is true fails with EMFILE.
type scarceFS struct {
	fs.ReadDirFS
	short func(op, name string) bool
}

func (s scarceFS) Open(name string) (fs.File, error) {
	if s.short("open", name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
	}
	return s.ReadDirFS.Open(name)
}

func (s scarceFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if s.short("readdir", name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: syscall.EMFILE}
	}
	return s.ReadDirFS.ReadDir(name)
}

// A search never passes over a file or directory it could not open for
// want of descriptors (found in review: a sandbox at its lowest open-files
// limit lost half the matches of a deep tree, and said the result was
// complete). A shortage that passes is waited out; one that lasts ends
// the search with an error that says so (ErrResources).
func TestSearchLosesNothingWhenDescriptorsRunOut(t *testing.T) {
	dir := t.TempDir()
	const depth = 100
	p := dir
	for range depth {
		for _, name := range []string{"a.txt", "z.txt"} {
			if err := os.WriteFile(filepath.Join(p, name), []byte("needle\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p = filepath.Join(p, "d")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Compile("needle", false)
	if err != nil {
		t.Fatal(err)
	}
	osfs := os.DirFS(dir).(fs.ReadDirFS)
	for _, workers := range []int{1, 4} {
		// Every open and listing fails once, the root's included.
		var tried sync.Map
		once := scarceFS{osfs, func(op, name string) bool {
			_, again := tried.LoadOrStore(op+" "+name, true)
			return !again
		}}
		got, err := Search(t.Context(), once, ".", m, Options{Workers: workers})
		if err != nil || len(got.Matches) != 2*depth || got.Files != 2*depth || got.Truncated {
			n := -1
			if got != nil {
				n = len(got.Matches)
			}
			t.Fatalf("%d workers, every open failing once with EMFILE: %d matches, %v; want %d, no error", workers, n, err, 2*depth)
		}
		for _, c := range []struct {
			what  string
			short func(op, name string) bool
		}{
			{"files", func(op, name string) bool {
				return op == "open" && strings.HasSuffix(name, "z.txt") && strings.Count(name, "/") > 50
			}},
			{"directories", func(op, name string) bool { return op == "readdir" && strings.Count(name, "/") > 50 }},
		} {
			got, err := Search(t.Context(), scarceFS{osfs, c.short}, ".", m, Options{Workers: workers})
			if !errors.Is(err, ErrResources) || !errors.Is(err, syscall.EMFILE) || got != nil {
				t.Fatalf("%d workers, deep %s failing with EMFILE for good: %+v, %v; want no result and an error that wraps ErrResources and EMFILE", workers, c.what, got, err)
			}
		}
	}
}

// push returns false once the search's context ends while it waits for
// room in a full queue (the workers stopped taking batches): a walk that
// went on waiting would never return. A hung push fails the test at
// go test's -timeout.
func TestPushStopsWhenTheSearchIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	q := newBatchQueue(ctx)
	defer q.release()
	for i := range queueMax {
		if !q.push([]job{{rank: i}}) {
			t.Fatal("push into a queue with room returned false")
		}
	}
	done := make(chan bool)
	go func() { done <- q.push([]job{{rank: queueMax}}) }()
	for waiting := false; !waiting; {
		runtime.Gosched()
		q.mu.Lock()
		waiting = q.full // set by push before it waits for room
		q.mu.Unlock()
	}
	cancel()
	if <-done {
		t.Fatal("push into a full queue returned true after the search was cancelled; want false")
	}
	if q.push([]job{{}}) {
		t.Fatal("push after the search was cancelled returned true; want false")
	}
}

// The workers' read buffers are kept from one search to the next also
// when GOMAXPROCS changes in between, as the agent changes it for every
// search: a sync.Pool dropped them, and each search allocated its buffers
// again (one grown to the largest file: 2 MB here).
func TestReadBuffersOutliveGOMAXPROCSChanges(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte("haystack\n"), 2<<20/9), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Compile("needle", false)
	if err != nil {
		t.Fatal(err)
	}
	fsys := os.DirFS(dir).(fs.ReadDirFS)
	search := func() {
		if _, err := Search(t.Context(), fsys, ".", m, Options{Workers: 1}); err != nil {
			t.Fatal(err)
		}
	}
	search()
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	var before, after runtime.MemStats
	for i := range 3 {
		runtime.GOMAXPROCS(prev + 1 + i%2)
		runtime.ReadMemStats(&before)
		search()
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Fatalf("a search after a change of GOMAXPROCS allocated %d bytes: its read buffer again", n)
		}
	}
}

// The read buffers kept after a search are bounded in bytes: a search with
// a worker per CPU of a 64-CPU host over a tree with a 3.5 MiB file in
// every batch of 32 kept 64 buffers of 4 MiB (found in review: 194 MiB
// in use after two garbage collections, in an agent that runs inside the
// sandbox's memory limit).
func TestKeptReadBuffersAreBoundedInBytes(t *testing.T) {
	dir := t.TempDir()
	for i := range 64 * 32 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%04d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if i%32 == 0 {
			err = f.Truncate(3<<20 + 512<<10) // sparse
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	m, err := Compile("needle", false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Search(t.Context(), os.DirFS(dir).(fs.ReadDirFS), ".", m, Options{Workers: 64})
	if err != nil || res.Files != 64*32 {
		t.Fatalf("search: %+v, %v", res, err)
	}
	readBufs.Lock()
	kept, n := 0, len(readBufs.free)
	for _, bp := range readBufs.free {
		kept += cap(*bp)
	}
	readBufs.Unlock()
	if kept > 8<<20 {
		t.Fatalf("after a search with 64 workers over 3.5 MiB files, %d read buffers of %d MiB in all are kept; want at most 8 MiB", n, kept>>20)
	}
}
