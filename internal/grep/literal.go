package grep

import (
	"bytes"
	"math"
	"regexp/syntax"
	"slices"
	"unicode"
	"unicode/utf8"
)

// Literal prefilter: from the parsed pattern, sets of strings such that
// every match holds one string of each set (ripgrep's idea of "inner
// literals", as in RE2's and Russ Cox's codesearch analyses; the code is
// ours). Each string of a set is searched by its two rarest bytes at their
// distance at once (indexPair: AVX2 where the CPU has it), or, folded or
// one byte long, with bytes.IndexByte on its rarest byte, and a comparison
// around each hit.
//
// What the prefilter must never do is drop a line the regexp would match,
// so everything here may over-approximate (find more candidates), never
// under-approximate:
//   - a literal is cut at U+FFFD (regexp reads an invalid byte as U+FFFD, so
//     "\x{FFFD}" matches bytes that are not its encoding) and at any rune
//     that is not valid;
//   - case folding is done on ASCII only: under (?i) a literal is cut at
//     every non-ASCII rune and at every ASCII letter whose fold orbit leaves
//     ASCII ('k' also matches U+212A KELVIN SIGN, 's' U+017F LONG S);
//   - a string built from a folded and an unfolded part is folded whole
//     (it then matches more than the pattern does).

const (
	// maxLiteral is the most bytes compared at one hit of a literal's rare
	// byte: longer literals are searched by their first maxLiteral bytes
	// (the regexp checks the rest), which bounds the work per input byte
	// for any input.
	maxLiteral = 64
	// maxSet is the most strings in one set (an alternation of literals,
	// a small class); larger sets are not used.
	maxSet = 16
	// maxExact is the longest string kept while the analysis builds
	// concatenations.
	maxExact = 256
	none     = math.MaxInt
)

// lit is a string a match holds. When fold is set, s is lower case and
// matches in any ASCII case.
type lit struct {
	s    string
	fold bool
}

// info is what the analysis knows about a subexpression: exact, when not
// nil, is every string it can match (the empty string included); each set
// in req holds one string that every match contains.
type info struct {
	exact []lit
	req   [][]lit
}

// prefilter returns the set to search for candidate lines (nil: none), the
// further sets a candidate line must hold one string of each, and whether
// a line holding scan's string is a match (the pattern is that literal).
func prefilter(tree *syntax.Regexp) (scan *litSet, need []*litSet, pure bool) {
	in := analyze(tree)
	sets := in.req
	if usable(in.exact) {
		sets = append(sets, in.exact)
	}
	if len(sets) == 0 {
		return nil, nil, false
	}
	slices.SortStableFunc(sets, func(a, b []lit) int {
		ca, cb := setCost(a), setCost(b)
		switch {
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		}
		return 0
	})
	scan = newLitSet(sets[0])
	for _, s := range sets[1:] {
		if len(need) == 4 { // each costs a look at the candidate line
			break
		}
		if !slices.Equal(s, sets[0]) {
			need = append(need, newLitSet(s))
		}
	}
	// A pattern that is one literal, kept whole: the literal is the match.
	pure = tree.Op == syntax.OpLiteral && len(in.exact) == 1 && len(in.exact[0].s) <= maxLiteral && len(scan.lits) == 1
	return scan, need, pure
}

// usable reports whether set can find candidates: not empty, and no string
// in it is empty (an empty string is in every line).
func usable(set []lit) bool {
	if len(set) == 0 || len(set) > maxSet {
		return false
	}
	for _, l := range set {
		if l.s == "" {
			return false
		}
	}
	return true
}

func analyze(re *syntax.Regexp) info {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return info{exact: []lit{{}}}
	case syntax.OpLiteral:
		return literalInfo(re.Rune, re.Flags&syntax.FoldCase != 0)
	case syntax.OpCharClass:
		return info{exact: classLits(re.Rune)}
	case syntax.OpCapture:
		return analyze(re.Sub[0])
	case syntax.OpPlus:
		return info{req: required(analyze(re.Sub[0]))}
	case syntax.OpQuest:
		if e := analyze(re.Sub[0]).exact; e != nil && len(e) < maxSet {
			return info{exact: union(e, []lit{{}})}
		}
	case syntax.OpRepeat:
		sub := analyze(re.Sub[0])
		switch {
		case re.Min == 0 && re.Max == 1 && sub.exact != nil && len(sub.exact) < maxSet:
			return info{exact: union(sub.exact, []lit{{}})}
		case re.Min == 0:
		case re.Min == re.Max && re.Min <= 3 && sub.exact != nil:
			e := []lit{{}}
			for range re.Min {
				if e = cross(e, sub.exact); e == nil {
					return info{req: required(sub)}
				}
			}
			return info{exact: e}
		default:
			return info{req: required(sub)}
		}
	case syntax.OpConcat:
		return concatInfo(re.Sub)
	case syntax.OpAlternate:
		return alternateInfo(re.Sub)
	}
	// Star, any character, a large class, no match: nothing is known.
	return info{}
}

// required is every set the subexpression's matches hold a string of.
func required(in info) [][]lit {
	if usable(in.exact) {
		return append(slices.Clip(in.req), in.exact)
	}
	return in.req
}

// literalInfo cuts a literal at the runes the prefilter cannot search for
// (see the package comment above); the pieces are all required, and the
// literal is exact when nothing was cut.
func literalInfo(runes []rune, fold bool) info {
	var pieces []lit
	var cur []byte
	cut := false
	for _, r := range runes {
		if !searchable(r, fold) {
			cut = true
			if len(cur) > 0 {
				pieces = append(pieces, lit{s: string(cur), fold: fold})
			}
			cur = cur[:0]
			continue
		}
		if fold {
			r = unicode.ToLower(r)
		}
		cur = utf8.AppendRune(cur, r)
	}
	if len(cur) > 0 {
		pieces = append(pieces, lit{s: string(cur), fold: fold})
	}
	var in info
	for _, p := range pieces {
		in.req = append(in.req, []lit{p})
	}
	if !cut {
		if len(pieces) == 0 {
			in.exact = []lit{{}}
		} else {
			in.exact = pieces[:1]
		}
	}
	return in
}

// searchable reports whether a byte search finds every place where r, as
// the regexp reads it (folded when fold), can match.
func searchable(r rune, fold bool) bool {
	if r == utf8.RuneError || !utf8.ValidRune(r) {
		return false
	}
	if !fold {
		return true
	}
	return r < utf8.RuneSelf && asciiFold(r)
}

// asciiFold reports whether every rune r folds to (its case orbit) is
// ASCII, so that an ASCII case-insensitive comparison decides a match.
func asciiFold(r rune) bool {
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// classLits is a small character class as strings: one per rune, an ASCII
// letter pair (as (?i) makes them) as one folded string. Nil when the class
// is large or holds a rune a byte search cannot find.
func classLits(ranges []rune) []lit {
	n := 0
	for i := 0; i+1 < len(ranges); i += 2 {
		n += int(ranges[i+1]-ranges[i]) + 1
		if n > maxSet {
			return nil
		}
	}
	var runes []rune
	for i := 0; i+1 < len(ranges); i += 2 {
		for r := ranges[i]; r <= ranges[i+1]; r++ {
			if !searchable(r, false) {
				return nil
			}
			runes = append(runes, r)
		}
	}
	if len(runes) == 2 && runes[0] < utf8.RuneSelf && runes[1] < utf8.RuneSelf &&
		unicode.ToLower(runes[0]) == unicode.ToLower(runes[1]) && asciiFold(runes[0]) {
		return []lit{{s: string(unicode.ToLower(runes[0])), fold: true}}
	}
	out := make([]lit, len(runes))
	for i, r := range runes {
		out[i] = lit{s: string(r)}
	}
	return out
}

// concatInfo: the exact strings of consecutive exact parts multiply; where
// the product grows too large or a part is not exact, the product so far
// is a required set and a new one starts.
func concatInfo(subs []*syntax.Regexp) info {
	var out info
	prod := []lit{{}}
	exact := true
	for _, sub := range subs {
		in := analyze(sub)
		out.req = append(out.req, in.req...)
		if in.exact == nil {
			if usable(prod) {
				out.req = append(out.req, prod)
			}
			prod, exact = []lit{{}}, false
			continue
		}
		if p := cross(prod, in.exact); p != nil {
			prod = p
			continue
		}
		if usable(prod) {
			out.req = append(out.req, prod)
		}
		prod, exact = in.exact, false
	}
	if usable(prod) {
		out.req = append(out.req, prod)
	}
	if exact {
		out.exact = prod
	}
	return out
}

// alternateInfo: the union of the alternatives' exact strings when they
// all have them; otherwise one set made of each alternative's best set
// (every match is a match of one alternative).
func alternateInfo(subs []*syntax.Regexp) info {
	ins := make([]info, len(subs))
	exact := true
	for i, sub := range subs {
		ins[i] = analyze(sub)
		exact = exact && ins[i].exact != nil
	}
	if exact {
		var u []lit
		for _, in := range ins {
			if u = union(u, in.exact); len(u) > maxSet {
				u = nil
				break
			}
		}
		if u != nil {
			return info{exact: u}
		}
	}
	var set []lit
	for _, in := range ins {
		best := bestSet(required(in))
		if best == nil {
			return info{}
		}
		if set = union(set, best); len(set) > maxSet {
			return info{}
		}
	}
	return info{req: [][]lit{set}}
}

func bestSet(sets [][]lit) []lit {
	var best []lit
	for _, s := range sets {
		if best == nil || setCost(s) < setCost(best) {
			best = s
		}
	}
	return best
}

// cross is every string of a followed by one of b, or nil when that is
// more than maxSet strings or one longer than maxExact.
func cross(a, b []lit) []lit {
	if len(a)*len(b) > maxSet {
		return nil
	}
	out := make([]lit, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			l := lit{s: x.s + y.s, fold: x.fold || y.fold}
			if len(l.s) > maxExact {
				return nil
			}
			if l.fold && !(x.fold && y.fold) {
				l.s = asciiLower(l.s)
			}
			out = append(out, l)
		}
	}
	return union(nil, out)
}

// union is a ∪ b without duplicates.
func union(a, b []lit) []lit {
	out := slices.Clone(a)
	for _, l := range b {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// setCost estimates how often a set's strings occur in text (lower is
// rarer, better to search for): each string by its rarest byte, and
// halved for each byte of length.
func setCost(set []lit) float64 {
	c := 0.0
	for _, l := range set {
		n := min(len(l.s), maxLiteral)
		_, f := rarest(l.s[:n], l.fold)
		c += f * math.Pow(0.5, float64(n))
	}
	return c
}

// rarest returns the offset of s's rarest byte and its frequency.
func rarest(s string, fold bool) (int, float64) {
	k, best := 0, math.Inf(1)
	for i := 0; i < len(s); i++ {
		f := byteFreq[s[i]]
		if fold && 'a' <= s[i] && s[i] <= 'z' {
			f += byteFreq[s[i]-'a'+'A']
		}
		if f < best {
			k, best = i, f
		}
	}
	return k, best
}

// byteFreq is a rough frequency (per 1000 bytes) of each byte in source
// code and prose, which is what workspaces hold: it only has to rank a
// pattern's bytes, so that the one searched for is rarely a false hit
// (ripgrep keeps a measured table for the same purpose).
var byteFreq = func() (t [256]float64) {
	for i := range t {
		t[i] = 0.2 // control bytes and the bytes of non-ASCII text
	}
	lower := map[byte]float64{'e': 55, 't': 45, 'a': 35, 'o': 32, 'i': 35, 'n': 35, 's': 32, 'r': 33,
		'h': 12, 'l': 18, 'd': 15, 'c': 17, 'u': 14, 'm': 11, 'f': 10, 'p': 10, 'g': 8, 'w': 5,
		'y': 6, 'b': 6, 'v': 4, 'k': 3, 'x': 3, 'j': 1, 'q': 0.6, 'z': 0.5}
	for c, f := range lower {
		t[c] = f
		t[c-'a'+'A'] = f/5 + 0.5
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = 4
	}
	other := map[byte]float64{' ': 150, '\t': 40, '\n': 30, '.': 12, ',': 9, '(': 11, ')': 11, '"': 6,
		'_': 5, '=': 7, ':': 4, ';': 2, '/': 6, '-': 4, '*': 3, '{': 3, '}': 3, '[': 3, ']': 3,
		'&': 1.5, '<': 1.2, '>': 1.5, '+': 1, '\'': 2, '!': 1, '|': 0.8, '#': 0.8, '%': 0.6,
		'$': 0.4, '@': 0.3, '\\': 0.6, '^': 0.2, '~': 0.1, '`': 0.4, '?': 0.4, '\r': 1}
	for c, f := range other {
		t[c] = f
	}
	return t
}()

// litSet searches for the first occurrence of any of a few strings.
type litSet struct {
	lits []scanner
}

// scanner searches for one string: bytes.IndexByte for its rarest byte (in
// both cases when folded), then a comparison of the string around it; or,
// for a string of two bytes or more that is not folded, its two rarest
// bytes at their distance at once (indexPair), which in source code rules
// out far more places than one byte does ("func New" by 'N' and 'w' two
// bytes apart: 26,000 places in the Go tree, where 'w' alone is 450,000,
// each a call of IndexByte and a comparison; ripgrep's memchr does the
// same with a pair of rare bytes).
type scanner struct {
	s      []byte // at most maxLiteral bytes; lower case when fold
	fold   bool
	k      int  // offset of the rare byte in s
	b1, b2 byte // the rare byte, and its other case (b1 when none)
	// pair: the string is searched by the bytes c1 at offset p1 and c2
	// at p1+d (d > 0).
	pair   bool
	p1, d  int
	c1, c2 byte
}

// litState remembers, for one scanner over one text, its next occurrence
// and the next positions of its rare byte (none: no more; below the
// position asked for: to be searched again). Each only moves forward, so
// the whole text is searched once per scanner.
type litState struct{ at, n1, n2 int }

// scanState is the search state of a litSet over one text.
type scanState [maxSet]litState

func newLitSet(set []lit) *litSet {
	ls := &litSet{}
	for _, l := range set {
		s := []byte(l.s[:min(len(l.s), maxLiteral)])
		k, _ := rarest(string(s), l.fold)
		sc := scanner{s: s, fold: l.fold, k: k, b1: s[k], b2: s[k]}
		if l.fold && 'a' <= s[k] && s[k] <= 'z' {
			sc.b2 = s[k] - 'a' + 'A'
		}
		if !l.fold && len(s) >= 2 {
			// The second rarest byte, at another offset.
			k2, best := -1, math.Inf(1)
			for i := range s {
				if f := byteFreq[s[i]]; i != k && f < best {
					k2, best = i, f
				}
			}
			lo, hi := min(k, k2), max(k, k2)
			sc.pair, sc.p1, sc.d, sc.c1, sc.c2 = true, lo, hi-lo, s[lo], s[hi]
		}
		ls.lits = append(ls.lits, sc)
	}
	return ls
}

func (ls *litSet) state() scanState {
	var st scanState
	for i := range st {
		st[i] = litState{-1, -1, -1}
	}
	return st
}

// index returns the start of the first occurrence at or after pos of any
// of the set's strings, or -1.
func (ls *litSet) index(data []byte, pos int, st *scanState) int {
	best := none
	for i := range ls.lits {
		best = min(best, ls.lits[i].find(data, pos, &st[i]))
	}
	if best == none {
		return -1
	}
	return best
}

// find returns the first occurrence of the scanner's string at or after
// pos, or none.
func (sc *scanner) find(data []byte, pos int, st *litState) int {
	if st.at >= pos {
		return st.at
	}
	if sc.pair {
		return sc.findPair(data, pos, st)
	}
	n := len(sc.s)
	start := pos
	for misses := 0; ; misses++ {
		if len(data)-pos < n {
			st.at = none
			return none
		}
		if !sc.fold && misses > 32 && misses > (pos-start)/16 {
			// The rare byte is not rare in this text (more than one
			// false hit per 16 bytes, each a call and a comparison):
			// bytes.Index (linear, SIMD) from here on. Not sooner: it
			// looks for the string's first byte, and in source code
			// that is usually commoner than the rare one — switching
			// after a fixed 32 false hits sent most of the Go tree's
			// bytes through bytes.Index for "func New" ('f' is four
			// times as frequent as 'w' there), 22–25 ms of matching
			// per search of 127 MB.
			return st.indexRest(data, pos, sc.s)
		}
		p := pos + sc.k
		if st.n1 < p {
			st.n1 = indexFrom(data, p, sc.b1)
		}
		q := st.n1
		if sc.b2 != sc.b1 {
			if st.n2 < p {
				st.n2 = indexFrom(data, p, sc.b2)
			}
			q = min(q, st.n2)
		}
		if q == none || q-sc.k+n > len(data) {
			st.at = none
			return none
		}
		c := q - sc.k
		if sc.equal(data[c : c+n]) {
			st.at = c
			return c
		}
		pos = c + 1
	}
}

// indexRest finds s in data from pos with bytes.Index, where a scanner's
// bytes turned out not to be rare in this text, and records the place.
func (st *litState) indexRest(data []byte, pos int, s []byte) int {
	i := bytes.Index(data[pos:], s)
	if i < 0 {
		st.at = none
	} else {
		st.at = pos + i
	}
	return st.at
}

// findPair is find for a pair scanner: st.n1 is the next place the string
// may start (its pair of bytes is there), at or after the position it was
// looked for from; each search for the pair starts after the last one, so
// the text is read once, and each place costs one comparison of at most
// maxLiteral bytes.
func (sc *scanner) findPair(data []byte, pos int, st *litState) int {
	n := len(sc.s)
	start := pos
	for misses := 0; ; misses++ {
		if len(data)-pos < n {
			st.at = none
			return none
		}
		if misses > 32 && misses > (pos-start)/16 {
			// The pair is not rare in this text (periodic data: hex
			// and base64 dumps, "zqzq..."), each place a call of
			// indexPair and a comparison: bytes.Index from here on,
			// as find does for one byte. Found in review: without
			// this, "zqzqzqzqX" over 8 MiB of "zq" took 42-51 ms, 15-27
			// times the scanner of one byte with its switch.
			return st.indexRest(data, pos, sc.s)
		}
		if st.n1 < pos {
			// The pair's second byte may be at most at the offset it
			// has in a string that ends with the text.
			lim := len(data) - n + sc.p1 + sc.d + 1
			if j := indexPair(data[pos+sc.p1:lim], sc.c1, sc.c2, sc.d); j >= 0 {
				st.n1 = pos + j
			} else {
				st.n1 = none
			}
		}
		c := st.n1
		if c == none {
			st.at = none
			return none
		}
		if bytes.Equal(data[c:c+n], sc.s) {
			st.at = c
			return c
		}
		pos = c + 1
	}
}

func (sc *scanner) equal(b []byte) bool {
	if !sc.fold {
		return bytes.Equal(b, sc.s)
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != sc.s[i] {
			return false
		}
	}
	return true
}

// indexFrom is the index of the first c at or after p, or none.
func indexFrom(data []byte, p int, c byte) int {
	if i := bytes.IndexByte(data[p:], c); i >= 0 {
		return p + i
	}
	return none
}
