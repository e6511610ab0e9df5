package shellscan

import (
	"fmt"
	"path"
	"strings"
)

// Pattern is a command rule's pattern: a program and optionally arguments. See ParsePattern
// for the language.
type Pattern struct {
	source  string
	program string   // glob on the program's base name
	flags   []string // required options, one spelling each: "-r", "--force"
	rest    string   // glob on the other arguments joined by single spaces
	hasRest bool
}

// ParsePattern parses a command pattern: words separated by spaces.
//
//   - The first word is the program, a glob matched against the base name of whatever
//     program runs: "rm" matches /bin/rm, ./rm, `env rm`, `sudo rm`; "python3*" matches
//     python3.12.
//   - Words starting with "-" are options the command must have, in any order or
//     combination: "-rf" asks for -r and -f and matches `rm -r -f`, `rm -fr`, `rm -Rf`,
//     `rm --recursive --force` (long and short spellings of common programs are known, and
//     unique abbreviations of long options count). A command with more options matches too.
//   - The other words are a glob (`*`, `?`, `[...]`) matched against the command's other
//     arguments (options removed), joined by single spaces, as a prefix on word boundaries:
//     "git push" matches `git push origin main`; "pip install *" matches any install.
//     After a "--" word everything is such a glob, even words starting with "-".
//
// A pattern of only a program matches every run of it.
func ParsePattern(s string) (*Pattern, error) {
	words := strings.Fields(s)
	if len(words) == 0 {
		return nil, fmt.Errorf("empty command pattern")
	}
	p := &Pattern{source: strings.Join(words, " "), program: path.Base(words[0])}
	if _, err := path.Match(p.program, ""); err != nil {
		return nil, fmt.Errorf("command pattern %q: bad program glob %q: %v", s, words[0], err)
	}
	var rest []string
	flagsDone := false
	for _, w := range words[1:] {
		switch {
		case !flagsDone && w == "--":
			flagsDone = true
		case !flagsDone && strings.HasPrefix(w, "--") && len(w) > 2:
			if strings.ContainsAny(w, "=*?[") {
				return nil, fmt.Errorf("command pattern %q: option %q: write options as plain names (--force); put values in the other words", s, w)
			}
			p.flags = append(p.flags, w)
		case !flagsDone && strings.HasPrefix(w, "-") && len(w) > 1:
			if strings.ContainsAny(w, "*?[") {
				return nil, fmt.Errorf("command pattern %q: option %q has glob characters; options match by name", s, w)
			}
			if singleDash[p.program] {
				p.flags = append(p.flags, w)
				continue
			}
			for _, c := range w[1:] {
				p.flags = append(p.flags, "-"+string(c))
			}
		default:
			rest = append(rest, w)
		}
	}
	if len(rest) > 0 {
		p.rest, p.hasRest = strings.Join(rest, " "), true
		if _, err := path.Match(strings.ReplaceAll(p.rest, "/", "x"), ""); err != nil {
			return nil, fmt.Errorf("command pattern %q: bad glob %q: %v", s, p.rest, err)
		}
	}
	return p, nil
}

// String returns the pattern as written (spaces normalised).
func (p *Pattern) String() string { return p.source }

// Verdict is how a pattern relates to a command.
type Verdict int

const (
	NoMatch Verdict = iota // the command is not matched, whatever its run-time values
	Maybe                  // it is matched or not depending on values only known when it runs
	Match                  // it is matched, whatever its run-time values
)

// Match reports whether c is matched by p.
func (p *Pattern) Match(c Command) Verdict {
	if ok, _ := path.Match(p.program, c.Name); !ok {
		return NoMatch
	}
	holes := false
	have := map[string]bool{}
	var longs []string
	var subject []item
	optionsDone := false
	valueNext := false
	for _, a := range c.Args {
		if a.Dynamic {
			holes = true
			subject = appendWord(subject, a)
			continue
		}
		t := a.Text
		switch {
		case valueNext:
			valueNext = false
			continue // the value of an option such as git -C DIR
		case optionsDone:
			subject = appendWord(subject, a)
		case t == "--":
			optionsDone = true
		case strings.HasPrefix(t, "--") && len(t) > 2:
			name, _, hasValue := strings.Cut(t, "=")
			have[name] = true
			longs = append(longs, name)
			valueNext = !hasValue && takesValue(c.Name, name)
		case strings.HasPrefix(t, "-") && len(t) > 1:
			if singleDash[c.Name] {
				have[t] = true
				continue
			}
			for i := 1; i < len(t); i++ {
				have["-"+t[i:i+1]] = true
				if takesValue(c.Name, "-"+t[i:i+1]) {
					valueNext = i == len(t)-1
					break
				}
			}
		default:
			subject = appendWord(subject, a)
		}
	}
	flagsOK := true
	for _, f := range p.flags {
		if !hasOption(c.Name, f, have, longs) {
			flagsOK = false
			break
		}
	}
	verdict := Match
	if !flagsOK {
		if !holes {
			return NoMatch
		}
		verdict = Maybe
	}
	if !p.hasRest {
		return verdict
	}
	glob := parseGlob(p.rest)
	if len(subject) > maxSubject {
		subject = append(subject[:maxSubject], item{hole: true})
	}
	prefix := append(append(append([]token(nil), glob...), token{lit: ' '}), token{star: true})
	switch {
	case globMatch(glob, subject, false) || globMatch(prefix, subject, false):
		return verdict
	case globMatch(glob, subject, true) || globMatch(prefix, subject, true):
		return Maybe
	}
	return NoMatch
}

// maxSubject bounds the argument text a glob is matched against; past it the rest counts as
// unknown (so a long command can only make a match Maybe, never hide it).
const maxSubject = 8192

type item struct {
	b    byte
	hole bool // a run-time value: any text at all, spaces included
}

func appendWord(s []item, w Word) []item {
	if len(s) > 0 {
		s = append(s, item{b: ' '})
	}
	if w.Dynamic {
		return append(s, item{hole: true})
	}
	for i := 0; i < len(w.Text); i++ {
		s = append(s, item{b: w.Text[i]})
	}
	return s
}

// token is one element of a glob: a byte, ?, *, or a bracket class.
type token struct {
	lit    byte
	any    bool // ?
	star   bool // *
	class  []byte
	negate bool
	ranges [][2]byte
}

func parseGlob(g string) []token {
	var ts []token
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch c {
		case '*':
			ts = append(ts, token{star: true})
		case '?':
			ts = append(ts, token{any: true})
		case '\\':
			if i+1 < len(g) {
				i++
			}
			ts = append(ts, token{lit: g[i]})
		case '[':
			j := i + 1
			t := token{}
			if j < len(g) && (g[j] == '!' || g[j] == '^') {
				t.negate = true
				j++
			}
			start := j
			for j < len(g) && (g[j] != ']' || j == start) {
				if j+2 < len(g) && g[j+1] == '-' && g[j+2] != ']' {
					t.ranges = append(t.ranges, [2]byte{g[j], g[j+2]})
					j += 3
					continue
				}
				t.class = append(t.class, g[j])
				j++
			}
			if j >= len(g) {
				ts = append(ts, token{lit: '['}) // unclosed: a literal bracket
				continue
			}
			ts = append(ts, t)
			i = j
		default:
			ts = append(ts, token{lit: c})
		}
	}
	return ts
}

func (t token) matches(b byte) bool {
	switch {
	case t.any:
		return true
	case t.class != nil || t.ranges != nil || t.negate:
		in := strings.IndexByte(string(t.class), b) >= 0
		for _, r := range t.ranges {
			in = in || (b >= r[0] && b <= r[1])
		}
		return in != t.negate
	}
	return t.lit == b
}

// globMatch matches tokens against a subject with holes. With exists false, a hole must be
// covered by a * (the match holds for every value of the hole); with exists true, a hole may
// stand for any text (the match holds for some value).
func globMatch(ts []token, s []item, exists bool) bool {
	// memo[i][j]: 0 unknown, 1 false, 2 true. Iterative over j descending would do, but the
	// recursion with memo is easier to check against the rules above.
	memo := make([][]uint8, len(ts)+1)
	for i := range memo {
		memo[i] = make([]uint8, len(s)+1)
	}
	var m func(i, j int) bool
	m = func(i, j int) bool {
		if memo[i][j] != 0 {
			return memo[i][j] == 2
		}
		r := false
		switch {
		case i == len(ts) && j == len(s):
			r = true
		case j < len(s) && s[j].hole && exists:
			// The hole is empty from here on, or produces the next glob element.
			r = m(i, j+1) || (i < len(ts) && m(i+1, j))
		case i == len(ts):
			r = false
		case ts[i].star:
			r = m(i+1, j) || (j < len(s) && m(i, j+1))
		case j == len(s):
			r = false
		case s[j].hole:
			r = false // only a * covers a hole for every value
		default:
			r = ts[i].matches(s[j].b) && m(i+1, j+1)
		}
		if r {
			memo[i][j] = 2
		} else {
			memo[i][j] = 1
		}
		return r
	}
	return m(0, 0)
}

// hasOption reports whether a command with the options in have (and the long ones in longs,
// as written) has option f, in any spelling of it.
func hasOption(program, f string, have map[string]bool, longs []string) bool {
	for _, spelling := range spellings(program, f) {
		if have[spelling] {
			return true
		}
		if strings.HasPrefix(spelling, "--") {
			// getopt_long takes any unambiguous abbreviation: --rec is --recursive.
			for _, l := range longs {
				if len(l) >= 3 && strings.HasPrefix(spelling, l) {
					return true
				}
			}
		}
	}
	return false
}

// spellings returns every way to write option f for program.
func spellings(program, f string) []string {
	for _, group := range synonyms[program] {
		for _, s := range group {
			if s == f {
				return group
			}
		}
	}
	return []string{f}
}

// synonyms lists, per program, options that mean the same thing. A rule on one spelling
// matches the others. The list covers the programs rules are usually about; for others a
// rule matches the spelling it names (write two rules to cover both).
var synonyms = map[string][][]string{
	"rm":      {{"-r", "-R", "--recursive"}, {"-f", "--force"}, {"-i", "--interactive"}, {"-d", "--dir"}, {"-v", "--verbose"}},
	"cp":      {{"-r", "-R", "--recursive"}, {"-f", "--force"}, {"-a", "--archive"}, {"-n", "--no-clobber"}, {"-i", "--interactive"}},
	"mv":      {{"-f", "--force"}, {"-n", "--no-clobber"}, {"-i", "--interactive"}},
	"chmod":   {{"-R", "--recursive"}},
	"chown":   {{"-R", "--recursive"}},
	"chgrp":   {{"-R", "--recursive"}},
	"ln":      {{"-s", "--symbolic"}, {"-f", "--force"}},
	"mkdir":   {{"-p", "--parents"}},
	"git":     {{"-f", "--force"}, {"-d", "--delete"}, {"-D"}, {"-n", "--dry-run"}, {"-u", "--set-upstream"}},
	"pip":     {{"-U", "--upgrade"}, {"-r", "--requirement"}, {"-e", "--editable"}, {"-y", "--yes"}, {"-I", "--ignore-installed"}},
	"pip3":    {{"-U", "--upgrade"}, {"-r", "--requirement"}, {"-e", "--editable"}, {"-y", "--yes"}, {"-I", "--ignore-installed"}},
	"npm":     {{"-g", "--global"}, {"-f", "--force"}, {"-D", "--save-dev"}},
	"apt":     {{"-y", "--yes", "--assume-yes"}},
	"apt-get": {{"-y", "--yes", "--assume-yes"}},
	"sed":     {{"-i", "--in-place"}},
	"tar":     {{"-x", "--extract", "--get"}, {"-c", "--create"}, {"-f", "--file"}, {"-z", "--gzip"}},
	"curl":    {{"-o", "--output"}, {"-O", "--remote-name"}, {"-X", "--request"}, {"-d", "--data"}},
	"rsync":   {{"-r", "--recursive"}, {"-a", "--archive"}},
}

// singleDash are programs whose long options have one dash (find -delete): such a word is
// one option, not a cluster of letters.
var singleDash = map[string]bool{"find": true, "java": true}

// takesValue reports options whose next word is their value, where skipping it matters for
// the words a rule's glob sees (`git -C dir push` is a push).
func takesValue(program, opt string) bool {
	switch program {
	case "git":
		switch opt {
		case "-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--exec-path":
			return true
		}
	case "pip", "pip3":
		switch opt {
		case "--python", "--log", "--proxy", "--cache-dir":
			return true
		}
	case "npm":
		switch opt {
		case "--prefix", "-C", "--workspace", "-w":
			return true
		}
	}
	return false
}
