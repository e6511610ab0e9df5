package grep

import (
	"context"
	"errors"
	"regexp/syntax"
	"slices"
	"sync"
	"unicode/utf8"
)

// dfa answers "does this line hold a match" with a lazily built
// deterministic automaton over the pattern's program, as RE2 and ripgrep
// do: each state is the set of program positions alive, and its
// transition on each ASCII byte is computed once and then followed with
// one table load per byte. Go's regexp simulates the NFA instead, which
// walks every alive position at every byte (tens of megabytes per second
// against hundreds); it remains what finds lines for patterns whose
// program is too large here.
//
// It stays linear for any input: a byte costs one table load, or once per
// state and byte a step over the program (bounded by its size); the states
// kept are bounded (maxStates), and the cache is emptied and rebuilt when
// full, so a pattern with an exponential number of states costs at most a
// program step per byte.
//
// Semantics are regexp's on one line: the line is the whole subject (^ and
// \A hold at its start, $ and \z at its end), \b and \B use ASCII word
// characters, and an invalid UTF-8 byte reads as U+FFFD.
type dfa struct {
	prog *syntax.Prog
	pool sync.Pool // of *dfaCache: states are built per worker, kept across files
	// every is how many bytes are read between looks at the context:
	// the work of a regexp call under matchBudget.
	every int
}

const (
	// maxDFAProg is the largest program run by the automaton.
	maxDFAProg = 2000
	// maxStates bounds a cache (each state holds 128 transitions).
	maxStates = 2048
)

type dstate struct {
	pcs      []uint32 // program positions before the empty-width checks of this position
	start    bool     // at the line's start
	prevWord bool     // the byte before is a word character
	// next holds the transition on each ASCII byte (nil: not built yet;
	// matched: the line has a match ending before that byte).
	next [utf8.RuneSelf]*dstate
	// other holds transitions on runes that are not ASCII.
	other map[rune]*dstate
	// endMatch caches whether the line matches when it ends here
	// (0 unknown, 1 no, 2 yes).
	endMatch uint8
}

// matched is the transition target that says a match was found.
var matched = &dstate{}

type dfaCache struct {
	// off says the automaton gave up on the current text; misses and
	// read count the states built and the bytes read for it.
	off          bool
	misses, read int
	// budget is the bytes left before the next look at the context
	// (kept across lines: most calls read one line).
	budget int
	states map[string]*dstate
	begin  *dstate
	stack  []uint32
	seen   []bool
	set    []uint32
	key    []byte
}

func newDFA(prog *syntax.Prog) *dfa {
	if len(prog.Inst) > maxDFAProg {
		return nil
	}
	return &dfa{prog: prog, every: max(256, min(16<<10, matchBudget/len(prog.Inst)))}
}

// errGaveUp says the automaton built a new state for one byte in eight or
// more, after maxStates of them (the pattern has more states than a cache
// keeps, like `[ab]*a[ab]{20}x`): building a state costs more than
// regexp's NFA step, so the caller goes on with regexp from the returned
// line start (RE2 does the same).
var errGaveUp = errors.New("automaton gave up")

func (d *dfa) cache() *dfaCache {
	if c, ok := d.pool.Get().(*dfaCache); ok {
		c.off, c.misses, c.read, c.budget = false, 0, 0, d.every
		return c
	}
	c := &dfaCache{seen: make([]bool, len(d.prog.Inst)), budget: d.every}
	c.reset(d)
	return c
}

func (c *dfaCache) reset(d *dfa) {
	c.states = make(map[string]*dstate)
	c.begin = c.state(d, []uint32{uint32(d.prog.Start)}, true, false)
}

// state returns the state for the positions pcs (sorted, no duplicates).
func (c *dfaCache) state(d *dfa, pcs []uint32, start, prevWord bool) *dstate {
	c.key = c.key[:0]
	c.key = append(c.key, b2u(start)|b2u(prevWord)<<1)
	for _, pc := range pcs {
		c.key = append(c.key, byte(pc), byte(pc>>8), byte(pc>>16), byte(pc>>24))
	}
	if s, ok := c.states[string(c.key)]; ok {
		return s
	}
	s := &dstate{pcs: slices.Clone(pcs), start: start, prevWord: prevWord}
	c.states[string(c.key)] = s
	return s
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func isWordByte(r rune) bool {
	return r < utf8.RuneSelf && syntax.IsWordChar(r)
}

// context is what holds between the state's position and the next rune r
// (r < 0: the line's end).
func (s *dstate) context(r rune) syntax.EmptyOp {
	var op syntax.EmptyOp
	if s.start {
		op |= syntax.EmptyBeginLine | syntax.EmptyBeginText
	}
	if r < 0 {
		op |= syntax.EmptyEndLine | syntax.EmptyEndText
	}
	if s.prevWord != (r >= 0 && isWordByte(r)) {
		op |= syntax.EmptyWordBoundary
	} else {
		op |= syntax.EmptyNoWordBoundary
	}
	return op
}

// closure follows the empty transitions of s's positions under op into
// c.set (the positions that read a rune), and reports whether a match is
// reached.
func (c *dfaCache) closure(d *dfa, s *dstate, op syntax.EmptyOp) bool {
	c.set = c.set[:0]
	c.stack = append(c.stack[:0], s.pcs...)
	clear(c.seen)
	found := false
	for len(c.stack) > 0 {
		pc := c.stack[len(c.stack)-1]
		c.stack = c.stack[:len(c.stack)-1]
		if c.seen[pc] {
			continue
		}
		c.seen[pc] = true
		in := &d.prog.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			found = true
		case syntax.InstAlt, syntax.InstAltMatch:
			c.stack = append(c.stack, in.Arg, in.Out)
		case syntax.InstCapture, syntax.InstNop:
			c.stack = append(c.stack, in.Out)
		case syntax.InstEmptyWidth:
			if syntax.EmptyOp(in.Arg)&^op == 0 {
				c.stack = append(c.stack, in.Out)
			}
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			c.set = append(c.set, pc)
		}
	}
	return found
}

// step computes s's transition on rune r.
func (c *dfaCache) step(d *dfa, s *dstate, r rune) *dstate {
	if c.closure(d, s, s.context(r)) {
		return matched
	}
	next := make([]uint32, 0, len(c.set)+1)
	for _, pc := range c.set {
		in := &d.prog.Inst[pc]
		ok := false
		switch in.Op {
		case syntax.InstRuneAny:
			ok = true
		case syntax.InstRuneAnyNotNL:
			ok = r != '\n'
		default:
			ok = in.MatchRune(r)
		}
		if ok {
			next = append(next, in.Out)
		}
	}
	// Unanchored: a match may also start after r.
	next = append(next, uint32(d.prog.Start))
	slices.Sort(next)
	next = slices.Compact(next)
	if len(c.states) >= maxStates {
		c.reset(d)
	}
	return c.state(d, next, false, isWordByte(r))
}

// next returns the bounds of the first line at or after pos (a line
// start) that holds a match, reading data once, one state per byte; a
// newline ends a line and starts the next at the start state. It looks at
// ctx every d.every bytes.
func (d *dfa) next(ctx context.Context, c *dfaCache, data []byte, pos int) (start, end int, ok bool, err error) {
	s, start := c.begin, pos
	i := pos
	defer func() { c.read += i - pos }()
	for i < len(data) {
		if c.budget--; c.budget <= 0 {
			if err := ctx.Err(); err != nil {
				return 0, 0, false, err
			}
			c.budget = d.every
			if c.misses >= maxStates && c.misses*8 > c.read+i-pos {
				c.off = true
				return start, 0, false, errGaveUp
			}
		}
		b := data[i]
		if b == '\n' {
			if c.endMatch(d, s) {
				return start, i, true, nil
			}
			s, start = c.begin, i+1
			i++
			continue
		}
		var next *dstate
		at := i
		if b < utf8.RuneSelf {
			if next = s.next[b]; next == nil {
				next = c.step(d, s, rune(b))
				s.next[b] = next
				c.misses++
			}
			i++
		} else {
			r, size := utf8.DecodeRune(data[i:])
			if next = s.other[r]; next == nil {
				next = c.step(d, s, r)
				if s.other == nil {
					s.other = make(map[rune]*dstate)
				}
				s.other[r] = next
				c.misses++
			}
			i += size
		}
		if next == matched {
			return start, lineEnd(data, at), true, nil
		}
		s = next
	}
	if start < len(data) && c.endMatch(d, s) {
		return start, len(data), true, nil
	}
	return 0, 0, false, nil
}

// endMatch reports whether a line that ends in state s holds a match.
func (c *dfaCache) endMatch(d *dfa, s *dstate) bool {
	if s.endMatch == 0 {
		s.endMatch = 1
		if c.closure(d, s, s.context(-1)) {
			s.endMatch = 2
		}
	}
	return s.endMatch == 2
}
