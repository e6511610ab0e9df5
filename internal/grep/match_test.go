package grep

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"time"
)

// perLine is the definition of the matcher's semantics: the lines of text
// (none in an empty text, and no line after a final newline) that the
// pattern matches on their own.
func perLine(ref *regexp.Regexp, text string) []string {
	var want []string
	if text == "" {
		return nil
	}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if ref.MatchString(line) {
			want = append(want, line)
		}
	}
	return want
}

func matchedLines(t testing.TB, m *Matcher, text string) []string {
	t.Helper()
	var got []string
	if err := m.EachLine(context.Background(), []byte(text), func(start, end int) bool {
		got = append(got, text[start:end])
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMatcherAgreesWithPerLineRegexp checks Matcher against the plain
// definition of its semantics: a line is reported exactly when the pattern
// matches that line alone. Each pattern also runs with tiny chunks, so that
// the chunked, literal and long-line (rune reader) paths all meet lines
// that straddle their boundaries. The patterns cover what the literal
// prefilter must get right: inner literals, alternations, small classes,
// case folding (and the letters whose fold leaves ASCII: k, s), U+FFFD
// against invalid bytes, optional and repeated parts.
func TestMatcherAgreesWithPerLineRegexp(t *testing.T) {
	texts := []string{
		"func NewReader() {}\nfunc NewBufferedReader(x int)\nfunc newReader()\n",
		"aaaa\naaab\nab ab abab\n",
		"TODO(x): one\n// TODO: two TODO(y)\n// fixme FIXME Fixme\n",
		"foo;\nbar\nfoo bar foo\n\nfoobar",
		"",
		"\n\n\n",
		"no match here",
		"caf\xc3\xa9 \xff\xfe bad utf8\r\nfoo\r\n",
		strings.Repeat("a", 100) + "b\n" + strings.Repeat("ab", 50) + "\naaa",
		"\u212Aelvin KELVIN kelvin\nStra\u017Fe STRASSE strasse\nİstanbul istanbul\n",
		"colour color colr\nhttp://x.png\nHTTP://Y.PNG\nWriter writer WRITER\nx\xffy\n",
		"NewReader(r)\nbufio.NewReader(os.Stdin)\nreadAll(NewReader)\n",
	}
	patterns := []string{
		`func New[A-Z]\w*Reader`, `func New`, `aa`, `a+b`, `ab|ac`, `TODO\(\w+\)`, `foo[^;]*bar`,
		`foo$`, `foo\b`, `^foo`, `\bbar`, `(ab)+`, `x*`, `a.*`, `a+$`, `(a+)+$`, `\Aaa`, `b\z`,
		`(?s)a.b`, `[^x]b`, `\s`, `^$`, `(?i)FOO`, `é`, `\x{FFFD}`, `foo\r$`, `(?:a\n|b)b`, `a(?:\nb)?`,
		// Literal prefilter cases.
		`\w+Reader\(`, `newreader`, `todo|fixme`, `TODO|FIXME`, `colou?r`, `col(ou|o)r`, `[Ww]riter`,
		`(?i)writer`, `kelvin`, `(?i)kelvin`, `(?i)strasse`, `(?i)stra(ss|ß)e`, `(?i)İstanbul`,
		`x\x{FFFD}y`, `(?i)http.*\.png$`, `(ab){2}`, `(?:foo|bar)baz|qux`, `a{2,}b`, `[ab]{3}`,
		`(?i:new)Reader`, `New(?i:reader)`, `b(?:)a`, `.Reader`, `Reader|`, `(?:foo|)bar`, `[\x{FFFD}x]y`,
	}
	for _, p := range patterns {
		for _, fold := range []bool{false, true} {
			m, err := Compile(p, fold)
			if err != nil {
				t.Fatalf("Compile(%q): %v", p, err)
			}
			ref := regexp.MustCompile("(?m)" + p)
			if fold {
				ref = regexp.MustCompile("(?mi)" + p)
			}
			if m.dfa == nil {
				t.Fatalf("%q: no automaton", p)
			}
			// The automaton, then regexp with chunks of each size.
			d, group := m.dfa, m.group
			for _, chunk := range []int{0, m.chunk, 7, 1} {
				m.dfa = nil
				if chunk == 0 {
					m.dfa = d
				} else {
					m.chunk, m.group = chunk, min(group, chunk)
				}
				for _, s := range texts {
					want, got := perLine(ref, s), matchedLines(t, m, s)
					if !reflect.DeepEqual(got, want) {
						t.Errorf("pattern %q (fold %v, automaton %v, chunk %d) on %q: found lines %q, want %q", p, fold, m.dfa != nil, chunk, s, got, want)
					}
				}
			}
		}
	}
}

// The prefilter finds the literals a reader would: without them the search
// runs the regular expression over every byte, at a twentieth of the
// speed (see BenchmarkSearchGoSrc).
func TestMatcherPrefilter(t *testing.T) {
	for _, c := range []struct {
		pattern string
		fold    bool
		scan    []string // the literals searched for (any of)
		pure    bool
	}{
		{`func New[A-Z]\w*Reader`, false, []string{"func New"}, false},
		{`\w+Reader\(`, false, []string{"Reader("}, false},
		{`newreader`, true, []string{"newreader"}, true},
		{`TODO|FIXME`, false, []string{"TODO", "FIXME"}, false},
		{`(?i)todo|fixme`, false, []string{"todo", "fixme"}, false},
		{`colou?r`, false, []string{"colour", "color"}, false},
		{`(?i)strasse`, false, []string{"tra"}, false},
		{`x*`, false, nil, false},
		{`\w+\(`, false, []string{"("}, false},
		{`[a-y]{200}[^a-y]`, false, nil, false},
	} {
		m, err := Compile(c.pattern, c.fold)
		if err != nil {
			t.Fatal(err)
		}
		var scan []string
		if m.scan != nil {
			for _, l := range m.scan.lits {
				scan = append(scan, string(l.s))
			}
		}
		if !reflect.DeepEqual(scan, c.scan) || m.pure != c.pure {
			t.Errorf("Compile(%q, fold %v): searches for %q (pure %v), want %q (pure %v)", c.pattern, c.fold, scan, m.pure, c.scan, c.pure)
		}
	}
}

// A pattern that cannot match without a newline is refused.
func TestCompileRefusesNewlines(t *testing.T) {
	for _, p := range []string{`foo\nbar`, `\n`, `[\n]`, `a(\n)+`, `x\n{2}|\ny`} {
		if _, err := Compile(p, false); !errors.Is(err, ErrNeedsNewline) {
			t.Errorf("Compile(%q) = %v, want ErrNeedsNewline", p, err)
		}
	}
	var se *syntax.Error
	if _, err := Compile(`func(`, false); !errors.As(err, &se) {
		t.Errorf("Compile of a malformed pattern: %v, want a *syntax.Error", err)
	}
}

// A line far over the work budget is read through a reader that gives up
// when the context ends: a cancelled search stops inside one line.
func TestMatcherStopsInsideALine(t *testing.T) {
	for _, p := range []string{`(a+)+$`, `x(a+)+$`} { // without and with a literal
		m, err := Compile(p, false)
		if err != nil {
			t.Fatal(err)
		}
		line := []byte("x" + strings.Repeat("a", 4*m.chunk) + "!")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err = m.EachLine(ctx, line, func(int, int) bool { t.Error("a cancelled search reported a match"); return true })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%q: EachLine with a cancelled context: %v", p, err)
		}
	}
	// The reader path itself, entered with a live context that ends
	// while it reads.
	line := []byte(strings.Repeat("a", 1<<20))
	ctx, cancel := context.WithCancel(t.Context())
	r := &ctxRunes{ctx: ctx, data: line}
	for range 10 {
		r.ReadRune()
	}
	cancel()
	n := 0
	for {
		if _, _, err := r.ReadRune(); err != nil {
			break
		}
		n++
	}
	if n > 1<<16 || r.err == nil {
		t.Fatalf("the rune reader read %d more runes after cancellation (err %v)", n, r.err)
	}
}

// Many short lines that all hold the literal and none matches: the
// context is still looked at (by bytes passed over), so a cancelled
// search does not run through the whole text.
func TestMatcherStopsAmongManyCandidates(t *testing.T) {
	m, err := Compile(`x(a+)+$`, false)
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(strings.Repeat("x"+strings.Repeat("a", 200)+"!\n", 1<<14))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.EachLine(ctx, text, func(int, int) bool { return true }); !errors.Is(err, context.Canceled) {
		t.Fatalf("EachLine with a cancelled context over %d candidate lines: %v", 1<<14, err)
	}
}

// The literal search is linear on the inputs that make a naive one
// quadratic: a literal whose rare byte is on every position, a long
// literal that almost matches everywhere, and the same folded. It counts
// the comparisons through the state: each position is tried once.
func TestLiteralSearchMovesForward(t *testing.T) {
	text := []byte(strings.Repeat("a", 1<<20))
	for _, c := range []struct {
		s    string
		fold bool
	}{{strings.Repeat("a", 60) + "b", false}, {strings.Repeat("a", 60) + "b", true}, {"ab", false}, {"AB", true}} {
		set := newLitSet([]lit{{s: strings.ToLower(c.s), fold: c.fold}})
		if !c.fold {
			set = newLitSet([]lit{{s: c.s}})
		}
		st := set.state()
		// Asked again from every line start, as the matcher does: the
		// state answers without searching again.
		for pos := 0; pos < len(text); pos += 4096 {
			if i := set.index(text, pos, &st); i >= 0 {
				t.Fatalf("%q found at %d in a text of a's", c.s, i)
			}
		}
		if st[0].at != none || st[0].n1 != none {
			t.Fatalf("%q: the state does not remember that there is no occurrence (%+v)", c.s, st[0])
		}
	}
}

// FuzzMatcher checks the pattern rewrite (newlines taken out of classes, \A
// and \z as line anchors, the tree printed and compiled again) and the
// literal prefilter against the definition: a line is reported exactly
// when the pattern matches that line alone. Patterns that regexp refuses,
// or that need a newline, are skipped.
func FuzzMatcher(f *testing.F) {
	for _, p := range []string{`a+$`, `(a+)+$`, `http.*\.png$`, `[^x]b`, `(?s).`, `\Aab\z`, `(?i)Straße`, `\bx\B`,
		`[\s\S]{2}`, `a|\n|b`, `(?U)a+?`, `\pL+\d`, `(?i)kelvin|sun`, `colou?r`, `\x{FFFD}b`, `(?i:ab)C|d[ef]`} {
		f.Add(p, "ab\naab\nxb\nStrasse STRASSE Stra\u017Fe \u212Aelvin\n\nhttp://x.png\n1a2\nabC colr \xff\xfeb\n", uint8(0), false)
	}
	f.Fuzz(func(t *testing.T, pattern, text string, chunk uint8, fold bool) {
		flags := "(?m)"
		if fold {
			flags = "(?mi)"
		}
		ref, err := regexp.Compile(flags + pattern)
		if err != nil {
			return
		}
		m, err := Compile(pattern, fold)
		if err != nil {
			return
		}
		want := perLine(ref, text)
		if got := matchedLines(t, m, text); !reflect.DeepEqual(got, want) {
			t.Fatalf("pattern %q (fold %v, automaton %v) on %q: lines %q, want %q", pattern, fold, m.dfa != nil, text, got, want)
		}
		// And through regexp, as for a program too large for the
		// automaton.
		m.dfa = nil
		if chunk > 0 {
			m.chunk, m.group = int(chunk), min(m.group, int(chunk))
		}
		if got := matchedLines(t, m, text); !reflect.DeepEqual(got, want) {
			t.Fatalf("pattern %q (fold %v, chunk %d) on %q: lines %q, want %q", pattern, fold, m.chunk, text, got, want)
		}
	})
}

// The inputs of issue 17 that ran for minutes when a pattern starting
// with a literal was retried at every occurrence of it: each completes,
// with the right line, well inside a deadline a quadratic search cannot
// meet (the assertion is completion; grep takes milliseconds).
func TestMatcherIsLinearOnHostileInput(t *testing.T) {
	jsonURLs := strings.Repeat(`{"u":"http://example.com/i.jpg"},`, (1<<20)/32)
	for _, c := range []struct{ pattern, line1, line2 string }{
		{`a+$`, strings.Repeat("a", 300<<10) + "b", "aaa"},
		{`http.*\.png$`, "[" + jsonURLs + "]", `see http://example.com/logo.png`},
		{`(a+)+$`, strings.Repeat("a", 1<<20) + "!", "a"},
		{`(?i)a+b$`, strings.Repeat("aA", 300<<10) + "c", "aab"},
		{strings.Repeat("a", 60) + "b", strings.Repeat("a", 1<<20), strings.Repeat("a", 60) + "b"},
	} {
		m, err := Compile(c.pattern, false)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		var got []string
		text := c.line1 + "\n" + c.line2 + "\n"
		err = m.EachLine(ctx, []byte(text), func(start, end int) bool { got = append(got, text[start:end]); return true })
		cancel()
		if err != nil || len(got) != 1 || got[0] != c.line2 {
			t.Fatalf("%q over a line of %d bytes: %d lines, %v; want line 2 only", c.pattern, len(c.line1), len(got), err)
		}
	}
}

// A pattern with more automaton states than a cache keeps makes the
// automaton give up and regexp go on from the line it left: the lines
// found are still exactly the definition's.
func TestAutomatonGivesUpToRegexp(t *testing.T) {
	text := string(abLines(1 << 20))
	none, err := Compile(`[ab]*a[ab]{20}[^ab]`, false)
	if err != nil {
		t.Fatal(err)
	}
	c := none.dfa.cache()
	if _, _, _, err := none.dfa.next(t.Context(), c, []byte(text), 0); err != errGaveUp || !c.off {
		t.Fatalf("the automaton did not give up on %d states (err %v)", len(c.states), err)
	}
	m, err := Compile(`[ab]*a[ab]{20}b$`, false)
	if err != nil {
		t.Fatal(err)
	}
	want := perLine(regexp.MustCompile(`(?m)[ab]*a[ab]{20}b$`), text)
	if got := matchedLines(t, m, text); !reflect.DeepEqual(got, want) || len(want) == 0 {
		t.Fatalf("after giving up: %d lines, want %d", len(got), len(want))
	}
}

// BenchmarkMatchGoSrcInMemory is the matcher alone (no file system) over
// the Go source tree's text files held in memory: the part of a search
// that is the engine's own work.
//
//	go test -run '^$' -bench MatchGoSrcInMemory ./internal/grep
func BenchmarkMatchGoSrcInMemory(b *testing.B) {
	const root = "/usr/local/go/src"
	var texts [][]byte
	size := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err == nil && !isBinary(data) {
			texts, size = append(texts, data), size+len(data)
		}
		return err
	})
	if err != nil {
		b.Skip("no Go source tree at", root, err)
	}
	for _, pattern := range []string{`func New[A-Z]\w*Reader`, `\w+Reader\(`, `(?i)newreader`, `TODO|FIXME`} {
		b.Run(pattern, func(b *testing.B) {
			m, err := Compile(pattern, false)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				found := 0
				for _, t := range texts {
					_ = m.EachLine(context.Background(), t, func(int, int) bool { found++; return true })
				}
				if found == 0 {
					b.Fatal("no match")
				}
			}
		})
	}
}

// A literal searched by a pair of its bytes (pair scanner) is found at
// every offset of the text — at its start, at its very end, across the
// vector steps' boundaries (32 and 64 bytes) — among decoys that hold one
// byte of the pair, both at the wrong distance, or the pair without the
// rest of the literal, and in overlapping repeats.
func TestPairLiteralAtEveryOffset(t *testing.T) {
	for _, pattern := range []string{`func New`, `func New\w*Reader`, `NNw`, `ab|Nw`} {
		m, err := Compile(pattern, false)
		if err != nil {
			t.Fatal(err)
		}
		ref := regexp.MustCompile("(?m)" + pattern)
		for _, filler := range []string{"w", "N", "N w", "Nxw", "func Nxw", "NNNw"} {
			for n := 0; n <= 140; n++ {
				for _, lit := range []string{"func New", "func NewXReader", "NNw", "Nw"} {
					text := strings.Repeat(filler, n/len(filler)+1)[:n] + lit
					for _, tail := range []string{"", "\n", "w" + strings.Repeat(filler, 3)} {
						s := text + tail
						if got, want := matchedLines(t, m, s), perLine(ref, s); !slices.Equal(got, want) {
							t.Fatalf("%q in %q: matched %q, want %q", pattern, s, got, want)
						}
					}
				}
			}
		}
	}
}
