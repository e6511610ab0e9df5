// Package grep is sandboxkit's content search engine: a line matcher that
// takes time linear in its input for every pattern (Matcher), and a search
// of a directory tree that uses every CPU and returns its matches in a fixed
// order (Search).
//
// It is an engine behind a tiny interface: it reads the tree through
// fs.ReadDirFS, so confinement (what a path may resolve to) is the caller's
// — the agent passes its workspace, which opens every path beneath the
// workspace root and never through a symbolic link out of it. The package
// imports nothing else of sandboxkit.
//
// Threat model: the pattern and the files come from a model or a user who
// may be hostile. No pattern and no file content may make a search run
// longer than a constant times the bytes it reads, or keep it running after
// its context ends (sandboxkit issue 17: `a+$` over one 300 KB line ran for
// over 100 s, `(a+)+$` over a 5 MB line never answered).
package grep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// Matcher finds the lines of a text that hold a match of a search pattern,
// in time linear in the text for every pattern, and stops within a bounded
// amount of work when its context ends. It is safe for concurrent use.
//
// Semantics: the pattern (RE2 syntax, Go's regexp) is matched within each
// line, as grep does: a match never spans a newline. \A and \z behave as ^
// and $ (a line is the whole subject); classes that include the newline
// (\s, [^a], (?s).) do not match it; a pattern that must contain a newline
// is refused.
//
// Why it is fast: most patterns hold literal text every match must contain
// (`func New[A-Z]\w*Reader` holds "func New" and "Reader"; `(?i)todo|fixme`
// one of two words in any case). The matcher finds those with a vector
// byte search (the literal's two rarest bytes at their distance, or its
// rarest byte: gigabytes per second) over the whole buffer, and decides
// only a line that holds them;
// a line that lacks one of the other literals is passed over (literal.go).
// Lines are decided by a lazy DFA (dfa.go), one table load per byte, where
// Go's regexp simulates an NFA at tens of megabytes per second; regexp
// remains for programs too large for the DFA and for patterns whose states
// outgrow its cache. Without a literal, the DFA reads the whole buffer in
// one pass.
//
// Why it is linear: the DFA does a table load per byte, or at most one
// step over the program when it builds a state, and hands over to regexp
// when it builds too many. Go's regexp runs in time linear in its input,
// but only per call. Each call here starts at a line start and the next one starts
// after the line that held the previous match or candidate, so no byte is
// read by more than one regexp call. The literal search moves forward only
// (each literal's next occurrence is remembered) and checks at most
// maxLiteral bytes per position it stops at. The search used to find a
// pattern's literal prefix and run the expression anchored at every
// occurrence, each run reading to the end of the line: occurrences × line
// length (issue 17).
//
// Why it can stop: a regexp call cannot be interrupted, so no call gets more
// than matchBudget of work (chunk length × program size). A line too long
// for that is read through a rune reader that checks the context every 64 Ki
// runes and ends the text early when it is cancelled.
type Matcher struct {
	re *regexp.Regexp
	// scan finds candidate lines: every match holds one of its literals
	// (nil: the pattern has no usable literal). need are further sets a
	// matching line must also hold one literal of. pure says a line
	// holding scan's literal matches (the pattern is that literal).
	scan *litSet
	need []*litSet
	pure bool
	// dfa, when not nil, decides lines instead of re (see dfa.go).
	dfa *dfa
	// chunk is the most bytes one regexp call reads (see matchBudget).
	// group is the most bytes of whole lines one call is given when
	// the pattern has no literal: within regexp's bounded backtracker's
	// limit, where it runs instead of the NFA (measured on the Go tree:
	// 1.5-2.5× faster than one call per 200 KB).
	chunk, group int
}

// matchBudget bounds the work of one regexp call, in bytes × program
// instructions: the NFA's cost per byte grows with the number of states
// alive, at most the program's size. 1<<22 is at most about 5-15 ms on
// this machine kind (20 times that in a -race build), the longest a
// cancelled search keeps working; it costs nothing measurable on the Go
// tree, whose files and lines are far shorter than a chunk.
const matchBudget = 1 << 22

// regexp runs its bounded backtracker, faster than its NFA, for programs
// of at most maxBacktrackProg instructions over inputs shorter than
// maxBacktrackVector bits over the program's size (regexp/backtrack.go).
const (
	maxBacktrackProg   = 500
	maxBacktrackVector = 256 * 1024
)

// ErrNeedsNewline is wrapped by Compile's error for a pattern that can only
// match across lines.
var ErrNeedsNewline = errors.New("the pattern needs a newline to match")

// Compile compiles a search pattern (RE2 syntax; ignoreCase folds case as
// (?i) does). A malformed pattern is a *syntax.Error (errors.As finds it);
// a pattern that can only match across lines wraps ErrNeedsNewline.
func Compile(pattern string, ignoreCase bool) (*Matcher, error) {
	flags := syntax.Perl &^ syntax.OneLine // (?m): ^ and $ at line ends
	if ignoreCase {
		flags |= syntax.FoldCase
	}
	tree, err := syntax.Parse(pattern, flags)
	if err != nil {
		return nil, err
	}
	if !withinLine(tree) {
		return nil, fmt.Errorf("pattern %q: %w", pattern, ErrNeedsNewline)
	}
	// Recompiled from the rewritten tree, whose String form carries its
	// flags ((?i:...), (?m:^), (?-s:.)).
	re, err := regexp.Compile(tree.String())
	if err != nil {
		return nil, err
	}
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		return nil, err
	}
	n := max(1, len(prog.Inst))
	m := &Matcher{re: re, chunk: max(4<<10, matchBudget/n)}
	m.group = m.chunk
	if n <= maxBacktrackProg {
		m.group = min(m.group, max(256, maxBacktrackVector/n-1))
	}
	m.scan, m.need, m.pure = prefilter(tree)
	m.dfa = newDFA(prog)
	return m, nil
}

// withinLine rewrites re in place so that it cannot match a newline, and
// reports false when the pattern needs one to match at all.
func withinLine(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if r == '\n' {
				return false
			}
		}
	case syntax.OpCharClass:
		re.Rune = classWithoutNewline(re.Rune)
		if len(re.Rune) == 0 {
			return false
		}
	case syntax.OpAnyChar:
		re.Op = syntax.OpAnyCharNotNL
	case syntax.OpBeginText:
		re.Op = syntax.OpBeginLine
	case syntax.OpEndText:
		re.Op, re.Flags = syntax.OpEndLine, re.Flags&^syntax.WasDollar
	case syntax.OpAlternate:
		// An alternative that needs a newline can never match; the
		// pattern is refused only when every one does.
		kept := re.Sub[:0]
		for _, s := range re.Sub {
			if withinLine(s) {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			return false
		}
		re.Sub = kept
		if len(kept) == 1 {
			*re = *kept[0]
		}
		return true
	case syntax.OpStar, syntax.OpQuest:
		// Optional: if the body needs a newline, only its empty form is
		// left.
		if !withinLine(re.Sub[0]) {
			*re = syntax.Regexp{Op: syntax.OpEmptyMatch}
		}
		return true
	case syntax.OpRepeat:
		if !withinLine(re.Sub[0]) {
			if re.Min > 0 {
				return false
			}
			*re = syntax.Regexp{Op: syntax.OpEmptyMatch}
		}
		return true
	}
	for _, s := range re.Sub {
		if !withinLine(s) {
			return false
		}
	}
	return true
}

// classWithoutNewline returns the class ranges (lo, hi pairs) without '\n'.
func classWithoutNewline(r []rune) []rune {
	out := make([]rune, 0, len(r)+2)
	for i := 0; i+1 < len(r); i += 2 {
		lo, hi := r[i], r[i+1]
		if lo <= '\n' && '\n' <= hi {
			if lo < '\n' {
				out = append(out, lo, '\n'-1)
			}
			if hi > '\n' {
				out = append(out, '\n'+1, hi)
			}
			continue
		}
		out = append(out, lo, hi)
	}
	return out
}

// EachLine calls emit with the bounds [start, end) of every line of data
// that holds a match (end excludes the newline), in order, until emit
// returns false. It returns ctx's error if ctx ended before it finished.
func (m *Matcher) EachLine(ctx context.Context, data []byte, emit func(start, end int) bool) error {
	var cur scanState
	if m.scan != nil {
		cur = m.scan.state()
	}
	var dc *dfaCache
	if m.dfa != nil {
		dc = m.dfa.cache()
		defer m.dfa.pool.Put(dc)
	}
	pos := 0
	for n := 0; pos < len(data); n++ {
		// Context.Err takes a lock: look every few lines; between two
		// looks the work is bounded (a literal search, a line's regexp
		// within the budget).
		if n&63 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		start, end, ok, err := m.next(ctx, data, pos, &cur, dc)
		if err != nil || !ok {
			return err
		}
		if !emit(start, end) {
			return nil
		}
		pos = end + 1
	}
	return nil
}

// next finds the first matching line at or after pos, a line start, with a
// bounded amount of work per regexp call.
func (m *Matcher) next(ctx context.Context, data []byte, pos int, cur *scanState, dc *dfaCache) (start, end int, ok bool, err error) {
	if m.scan != nil {
		return m.nextCandidate(ctx, data, pos, cur, dc)
	}
	if dc != nil && !dc.off {
		start, end, ok, err := m.dfa.next(ctx, dc, data, pos)
		if err != errGaveUp {
			return start, end, ok, err
		}
		pos = start // regexp goes on from the line the automaton left
	}
	for pos < len(data) {
		if err := ctx.Err(); err != nil {
			return 0, 0, false, err
		}
		// No literal: run the pattern over a group of whole lines, or
		// over one line that is longer (within the budget, or through
		// the reader that can stop).
		limit := pos + m.group
		if limit >= len(data) {
			// The last chunk ends at the text's end, or before its final
			// newline, after which there is no line to match.
			limit = len(data)
			if data[limit-1] == '\n' {
				limit--
			}
		} else if j := bytes.LastIndexByte(data[pos:limit], '\n'); j >= 0 {
			limit = pos + j
		} else {
			end = lineEnd(data, pos)
			found, err := m.matchLine(ctx, data[pos:end], nil)
			if err != nil || found {
				return pos, end, found, err
			}
			pos = end + 1
			continue
		}
		loc := m.re.FindIndex(data[pos:limit])
		if loc == nil {
			pos = limit + 1
			continue
		}
		i := pos + loc[0]
		return pos + bytes.LastIndexByte(data[pos:i], '\n') + 1, lineEnd(data, i), true, nil
	}
	return 0, 0, false, nil
}

// nextCandidate is next for a pattern with literals: only a line holding
// one of scan's literals (and one of each need set's) can match, and the
// regexp runs over that line alone.
func (m *Matcher) nextCandidate(ctx context.Context, data []byte, pos int, cur *scanState, dc *dfaCache) (start, end int, ok bool, err error) {
	// work counts the bytes passed over since the context was last
	// looked at; a look every chunk of them keeps the work a cancelled
	// search does within the budget.
	work := 0
	for pos < len(data) {
		i := m.scan.index(data, pos, cur)
		if i < 0 {
			return 0, 0, false, nil
		}
		start = pos + bytes.LastIndexByte(data[pos:i], '\n') + 1
		end = lineEnd(data, i)
		if work += end - pos; work >= m.chunk {
			if err := ctx.Err(); err != nil {
				return 0, 0, false, err
			}
			work = 0
		}
		if m.pure {
			return start, end, true, nil
		}
		line := data[start:end]
		if m.holdsNeeded(line) {
			found, err := m.matchLine(ctx, line, dc)
			if err != nil || found {
				return start, end, found, err
			}
		}
		pos = end + 1
	}
	return 0, 0, false, nil
}

// holdsNeeded reports whether line holds a literal of every need set.
func (m *Matcher) holdsNeeded(line []byte) bool {
	for _, s := range m.need {
		st := s.state()
		if s.index(line, 0, &st) < 0 {
			return false
		}
	}
	return true
}

// lineEnd returns the index of the newline ending the line holding i, or
// len(data).
func lineEnd(data []byte, i int) int {
	if j := bytes.IndexByte(data[i:], '\n'); j >= 0 {
		return i + j
	}
	return len(data)
}

// matchLine reports whether line (no newline in it) holds a match. A line
// over the budget is read through a reader that gives up when ctx ends.
func (m *Matcher) matchLine(ctx context.Context, line []byte, dc *dfaCache) (bool, error) {
	if dc != nil && !dc.off {
		_, _, found, err := m.dfa.next(ctx, dc, line, 0)
		if err != errGaveUp {
			return found, err
		}
	}
	if len(line) <= m.chunk {
		return m.re.Match(line), nil
	}
	r := &ctxRunes{ctx: ctx, data: line}
	found := m.re.MatchReader(r)
	if r.err != nil {
		return false, r.err
	}
	return found, nil
}

// ctxRunes reads data as runes (invalid UTF-8 as U+FFFD, one byte each, as
// regexp does for a byte slice) and ends it early, recording ctx's error,
// once ctx is done; it looks every 64 Ki runes.
type ctxRunes struct {
	ctx  context.Context
	data []byte
	pos  int
	n    int
	err  error
}

func (r *ctxRunes) ReadRune() (rune, int, error) {
	if r.n++; r.n&0xffff == 0 && r.err == nil {
		r.err = r.ctx.Err()
	}
	if r.err != nil || r.pos >= len(r.data) {
		return 0, 0, io.EOF
	}
	if c := r.data[r.pos]; c < utf8.RuneSelf {
		r.pos++
		return rune(c), 1, nil
	}
	c, size := utf8.DecodeRune(r.data[r.pos:])
	r.pos += size
	return c, size, nil
}
