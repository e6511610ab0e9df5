package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// LineMatcher finds the lines of a text that hold a match of a search
// pattern, in time linear in the text for every pattern, and stops within a
// bounded amount of work when its context ends.
//
// Semantics: the pattern (RE2 syntax) is matched within each line, as grep
// does and as fs.search documents: a match never spans a newline. \A and \z
// behave as ^ and $ (a line is the whole subject); classes that include the
// newline (\s, [^a], (?s).) do not match it; a pattern that must contain a
// newline is refused.
//
// Why it is linear: Go's regexp runs in time linear in its input (an NFA, a
// bounded backtracker, or a one-pass machine), but only per call. The
// search used to find a pattern's literal prefix with bytes.Index and run
// the regular expression anchored at every occurrence; each run could read
// to the end of the line, so `a+$` over one 300 KB line of "a" took
// occurrences × line length (over 100 s, against grep's 56 ms). Here each
// regexp call starts at a line start and the next one starts after the line
// holding the previous match, so no byte is read by more than one call that
// matters: a call that fails reads to the end of its chunk, and the chunk
// is then done.
//
// Why it can stop: a regexp call cannot be interrupted, so no call gets
// more than matchBudget of work (chunk length × program size). A line too
// long for that is read through a rune reader that checks the context every
// 64 Ki runes and ends the text early when it is cancelled.
//
// It is exported so that other implementations of the protocol (the fake
// backend) search exactly as the agent does.
type LineMatcher struct {
	re *regexp.Regexp
	// literal is a prefix every match starts with (nil if none or when
	// case is folded); pure says the pattern is exactly that literal.
	literal []byte
	pure    bool
	// chunk is the most bytes one regexp call reads (see matchBudget).
	chunk int
}

// matchBudget bounds the work of one regexp call, in bytes × program
// instructions: the NFA's cost per byte grows with the number of states
// alive, at most the program's size. 1<<22 is at most about 5-15 ms on
// this machine kind (20 times that in a -race build), the longest a
// cancelled search keeps working; it costs nothing measurable on the Go
// tree, whose files and lines are far shorter than a chunk.
const matchBudget = 1 << 22

// NewLineMatcher compiles a search pattern. A malformed pattern, or one that
// can only match across lines, is an INVALID_ARGUMENT error that says why.
func NewLineMatcher(pattern string, ignoreCase bool) (*LineMatcher, *wire.WireError) {
	if pattern == "" {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "search pattern is empty")
	}
	flags := syntax.Perl &^ syntax.OneLine // (?m): ^ and $ at line ends
	if ignoreCase {
		flags |= syntax.FoldCase
	}
	tree, err := syntax.Parse(pattern, flags)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %s (RE2 syntax: escape literal characters like ( [ . with a backslash)", pattern, se.Code)
		}
		return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %v", pattern, err)
	}
	if !withinLine(tree) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "pattern %q needs a newline (\\n) to match, but search matches within one line: use $ to match at the end of a line, or search for each line's part separately", pattern)
	}
	// Recompiled from the rewritten tree, whose String form carries its
	// flags ((?i:...), (?m:^), (?-s:.)).
	re, err := regexp.Compile(tree.String())
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %v", pattern, err)
	}
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %v", pattern, err)
	}
	m := &LineMatcher{re: re, chunk: max(4<<10, matchBudget/max(1, len(prog.Inst)))}
	if lit, complete := re.LiteralPrefix(); lit != "" && !ignoreCase {
		m.literal, m.pure = []byte(lit), complete
	}
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
func (m *LineMatcher) EachLine(ctx context.Context, data []byte, emit func(start, end int) bool) error {
	pos := 0
	for pos < len(data) {
		if err := ctx.Err(); err != nil {
			return err
		}
		start, end, ok, err := m.next(ctx, data, pos)
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
func (m *LineMatcher) next(ctx context.Context, data []byte, pos int) (start, end int, ok bool, err error) {
	for pos < len(data) {
		if err := ctx.Err(); err != nil {
			return 0, 0, false, err
		}
		if m.literal != nil {
			// Only lines holding the literal can match: find the next
			// one and run the pattern over that line alone.
			i := bytes.Index(data[pos:], m.literal)
			if i < 0 {
				return 0, 0, false, nil
			}
			start = pos + bytes.LastIndexByte(data[pos:pos+i], '\n') + 1
			end = lineEnd(data, pos+i)
			if m.pure {
				return start, end, true, nil
			}
			found, err := m.matchLine(ctx, data[start:end])
			if err != nil || found {
				return start, end, found, err
			}
			pos = end + 1
			continue
		}
		// No literal: run the pattern over a chunk of whole lines, as
		// many as the budget allows, or over one line that is longer.
		limit := pos + m.chunk
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
			found, err := m.matchLine(ctx, data[pos:end])
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
func (m *LineMatcher) matchLine(ctx context.Context, line []byte) (bool, error) {
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
