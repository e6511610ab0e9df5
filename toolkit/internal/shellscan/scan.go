// Package shellscan finds every program a shell command line would run, as far as that can be
// known before it runs, for the command policy of package toolkit.
//
// The text is parsed with a real shell parser (mvdan.cc/sh/v3/syntax, bash dialect) and every
// simple command anywhere in it is reported: in pipelines, lists, subshells, command and
// process substitutions, parameter defaults, here-documents, function bodies, and in the
// strings given to `bash -c`, `sh -c`, `eval` and `trap` (parsed again, recursively). Wrappers
// that run another program (env, sudo, nice, timeout, xargs, find -exec, nohup, ...) are
// reported and so is the program they run. Quoting is undone the way the shell does it, so
// `\rm`, `'r'm`, `r""m` and `$'\x72m'` are all rm, and a program is named by its base name
// whatever path reaches it.
//
// Threat model: the text comes from a model and may be written to slip past a filter. What
// cannot be known statically — a program name built at run time (`$(printf rm)`, `$x`, a
// glob), `eval` of a variable, `source` of a file, a shell reading a script or its input —
// is reported as [Unknown], never dropped: the caller decides it by a default that must not
// be "allow". Text that does not parse is Unknown too. This is a guardrail on what a model
// asks for, not a boundary: a program may still run another (python -c "os.system(...)").
package shellscan

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// maxDepth bounds nesting of re-parsed strings (bash -c "bash -c '...'"), alias and function
// expansion. Deeper text is Unknown rather than a stack overflow.
const maxDepth = 12

// maxCommands bounds the work one scan may do (brace expansion, many aliases); past it the
// rest is Unknown.
const maxCommands = 4096

// Word is one argument of a command.
type Word struct {
	Text    string // the value after quote removal; for a dynamic word, its source text
	Dynamic bool   // the value is only known when it runs (an expansion, a glob, xargs input)
}

// Command is one program the text would run.
type Command struct {
	Name string   // base name of the program, e.g. "rm" for /bin/rm
	Path string   // the program as written (after quote removal), e.g. "/bin/rm"
	Args []Word   // the arguments after the program
	Via  []string // what reaches it, outermost first, e.g. ["sudo", "bash -c"]; empty at top level
}

// String shows the command as the policy saw it: "rm -f x (via sudo, bash -c)".
func (c Command) String() string {
	var b strings.Builder
	b.WriteString(c.Path)
	for _, a := range c.Args {
		b.WriteByte(' ')
		if a.Dynamic {
			b.WriteString(a.Text)
		} else {
			b.WriteString(quote(a.Text))
		}
	}
	if len(c.Via) > 0 {
		b.WriteString(" (via " + strings.Join(c.Via, ", ") + ")")
	}
	return b.String()
}

// Unknown is a place where what runs cannot be known before it runs.
type Unknown struct {
	Text   string // the part of the command it is about
	Reason string // why, in words for a model: "the program name is computed when it runs"
}

// Result is what a scan found.
type Result struct {
	Commands []Command
	Unknown  []Unknown
}

// Defs are the aliases and functions a bash session has defined, followed from the commands
// sent to it, so that a later call of such a name is decided by what it runs.
type Defs struct {
	Aliases map[string]string // name -> replacement text
	Funcs   map[string]string // name -> body source
}

// Clone returns a copy that can be updated without changing d (nil gives an empty Defs).
func (d *Defs) Clone() *Defs {
	c := &Defs{Aliases: map[string]string{}, Funcs: map[string]string{}}
	if d != nil {
		for k, v := range d.Aliases {
			c.Aliases[k] = v
		}
		for k, v := range d.Funcs {
			c.Funcs[k] = v
		}
	}
	return c
}

type scanner struct {
	res  Result
	defs *Defs
	// expanding holds the aliases and functions being expanded, so that `alias ls='ls -l'`
	// or a recursive function ends (bash does not re-expand an alias inside itself either).
	expanding map[string]bool
}

// Shell scans a shell command line. defs (may be nil) supplies the aliases and functions
// defined earlier and receives those this text defines.
func Shell(src string, defs *Defs) Result {
	s := newScanner(defs)
	s.text(src, nil, 0)
	return s.res
}

// PythonCell scans the shell parts of a Python kernel cell: `!cmd` and `var = !cmd` lines,
// `%pip ...`, and `%%bash` / `%%sh` cells (under `%%time` too). Python code itself is not
// analysed: os.system("rm x") is out of reach of this policy. Any line of the cell that
// looks like a shell escape counts, even inside a Python string: over-reporting is the safe
// side here.
func PythonCell(code string, defs *Defs) Result {
	s := newScanner(defs)
	s.pythonCell(code, 0)
	return s.res
}

func newScanner(defs *Defs) *scanner {
	if defs == nil {
		defs = &Defs{}
	}
	if defs.Aliases == nil {
		defs.Aliases = map[string]string{}
	}
	if defs.Funcs == nil {
		defs.Funcs = map[string]string{}
	}
	return &scanner{defs: defs, expanding: map[string]bool{}}
}

func (s *scanner) pythonCell(code string, depth int) {
	if strings.HasPrefix(code, "%%") {
		first, body, _ := strings.Cut(code, "\n")
		fields := strings.Fields(strings.TrimPrefix(first, "%%"))
		name := ""
		if len(fields) > 0 {
			name = fields[0]
		}
		switch name {
		case "time":
			if depth < maxDepth {
				s.pythonCell(body, depth+1)
			}
		case "bash", "sh":
			s.text(body, []string{"%%" + name}, 0)
		}
		return
	}
	for _, line := range strings.Split(code, "\n") {
		body := strings.TrimSpace(strings.TrimRight(line, "\r"))
		if target, rest, ok := strings.Cut(body, "="); ok && strings.HasPrefix(strings.TrimSpace(rest), "!") && isIdentifier(strings.TrimSpace(target)) {
			s.text(strings.TrimSpace(rest)[1:], []string{"!"}, 0)
			continue
		}
		switch {
		case strings.HasPrefix(body, "!"):
			s.text(body[1:], []string{"!"}, 0)
		case strings.HasPrefix(body, "%pip ") || body == "%pip":
			s.text(body[1:], []string{"%pip"}, 0)
		}
	}
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 127 || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return true
}

// source returns the text an Unknown is about; printing it is left until one is found (it
// was a quarter of a scan's time when done for every command).
type source func() string

func textOf(s string) source { return func() string { return s } }

func (s *scanner) unknown(text source, reason string, args ...any) {
	s.res.Unknown = append(s.res.Unknown, Unknown{Text: shorten(text()), Reason: fmt.Sprintf(reason, args...)})
}

// text parses src and scans every simple command in it.
func (s *scanner) text(src string, via []string, depth int) {
	if depth > maxDepth {
		s.unknown(textOf(src), "commands nested more than %d levels deep are not followed", maxDepth)
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		s.unknown(textOf(src), "it cannot be parsed as a shell command (%v)", err)
		return
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		if len(s.res.Commands)+len(s.res.Unknown) > maxCommands {
			return false
		}
		switch n := n.(type) {
		case *syntax.FuncDecl:
			// The body is walked as if it ran (it will, when called); the definition is
			// remembered so that a call by name, later or in another call, is followed.
			for _, name := range funcNames(n) {
				s.defs.Funcs[name] = printNode(n.Body)
			}
		case *syntax.CallExpr:
			s.call(n, via, depth)
		}
		return true
	})
	if len(s.res.Commands)+len(s.res.Unknown) > maxCommands {
		s.unknown(textOf(src), "it runs more than %d commands, past what is checked", maxCommands)
	}
}

func funcNames(f *syntax.FuncDecl) []string {
	var names []string
	if f.Name != nil {
		names = append(names, f.Name.Value)
	}
	for _, l := range f.Names {
		names = append(names, l.Value)
	}
	return names
}

// call scans one simple command of parsed text.
func (s *scanner) call(c *syntax.CallExpr, via []string, depth int) {
	if len(c.Args) == 0 {
		return // assignments only; substitutions in them are walked separately
	}
	var words []Word
	for i, w := range c.Args {
		expanded := expandWord(w, i == 0)
		words = append(words, expanded...)
	}
	s.argv(words, via, depth, func() string { return printNode(c) })
}

// expandWord returns the values a word stands for: one usually, several after brace
// expansion ({rm,x} is the two words rm and x: without it, `{rm,-rf,.}` would be a program
// named "{rm,-rf,.}"). A word whose value depends on run time is Dynamic. For the program
// position an unquoted glob is dynamic too: /bin/r? runs rm when /bin/rm is the only match.
func expandWord(w *syntax.Word, program bool) []Word {
	if hasBraces(w) {
		cp := &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
		if syntax.SplitBraces(cp) {
			var out []Word
			for bw, err := range expand.BracesSeq(nil, cp) {
				if err != nil || len(out) > 64 {
					return []Word{{Text: printNode(w), Dynamic: true}}
				}
				lit, ok := literal(bw, program && len(out) == 0)
				if !ok {
					out = append(out, Word{Text: printNode(w), Dynamic: true})
					continue
				}
				out = append(out, Word{Text: lit})
			}
			return out
		}
	}
	lit, ok := literal(w, program)
	if !ok {
		return []Word{{Text: printNode(w), Dynamic: true}}
	}
	return []Word{{Text: lit}}
}

func hasBraces(w *syntax.Word) bool {
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok && strings.Contains(l.Value, "{") {
			return true
		}
	}
	return false
}

// literal returns the value of w after quote removal, or false when it depends on run time.
// glob makes unquoted glob characters dynamic (they may match files). Quote removal is what
// a first-token filter misses: \rm, 'r'm, r""m and $'\x72m' all run rm.
func literal(w *syntax.Word, glob bool) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if glob && strings.ContainsAny(unescapedMeta(p.Value), "*?[") {
				return "", false
			}
			b.WriteString(unescape(p.Value, false))
		case *syntax.SglQuoted:
			if p.Dollar {
				// $'\x72m': ANSI-C escapes, decoded by the shell library's own expander
				// (no environment is involved in this part).
				v, err := expand.Literal(nil, &syntax.Word{Parts: []syntax.WordPart{p}})
				if err != nil {
					return "", false
				}
				b.WriteString(v)
			} else {
				b.WriteString(p.Value)
			}
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false // $"..." is translated at run time
			}
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescape(l.Value, true))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unescapedMeta returns s without backslash-escaped characters, so that `\*` is not taken
// for a glob.
func unescapedMeta(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unescape removes the backslashes the shell removes: before any character outside quotes,
// before $ ` " \ and newline inside double quotes.
func unescape(s string, dquoted bool) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		n := s[i+1]
		if dquoted && !strings.ContainsRune("$`\"\\\n", rune(n)) {
			b.WriteByte(c)
			continue
		}
		i++
		if n != '\n' {
			b.WriteByte(n)
		}
	}
	return b.String()
}

// argv scans one command given as words, after the shell's expansion: the program, then
// what it runs in turn (wrappers, shells, aliases, functions).
func (s *scanner) argv(words []Word, via []string, depth int, src source) {
	if len(words) == 0 {
		return
	}
	if depth > maxDepth {
		s.unknown(src, "commands nested more than %d levels deep are not followed", maxDepth)
		return
	}
	prog := words[0]
	if prog.Dynamic {
		s.unknown(src, "the program name %s is only known when it runs", prog.Text)
		return
	}
	name := path.Base(prog.Text)
	if prog.Text == "" {
		name = ""
	}
	args := words[1:]
	s.res.Commands = append(s.res.Commands, Command{Name: name, Path: prog.Text, Args: args, Via: via})

	// A name the session defined is followed to what it runs. The command itself was
	// reported above too: a function named like a denied program is denied, a harmless
	// over-approximation.
	if v, ok := s.defs.Aliases[prog.Text]; ok && !s.expanding["alias "+prog.Text] {
		s.expanding["alias "+prog.Text] = true
		s.text(v+" "+joinWords(args), append(clip(via), "alias "+prog.Text), depth+1)
		delete(s.expanding, "alias "+prog.Text)
	}
	if body, ok := s.defs.Funcs[prog.Text]; ok && !s.expanding["func "+prog.Text] {
		s.expanding["func "+prog.Text] = true
		s.text(body, append(clip(via), "function "+prog.Text), depth+1)
		delete(s.expanding, "func "+prog.Text)
	}
	s.inner(name, prog.Text, args, via, depth, src)
}

// clip returns via with no spare capacity, so that appends made for different branches do
// not share an array.
func clip(via []string) []string { return via[:len(via):len(via)] }

func joinWords(ws []Word) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		if w.Dynamic {
			parts[i] = w.Text
		} else {
			parts[i] = quote(w.Text)
		}
	}
	return strings.Join(parts, " ")
}

func quote(s string) string {
	q, err := syntax.Quote(s, syntax.LangBash)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return q
}

func printNode(n syntax.Node) string {
	var b strings.Builder
	if err := syntax.NewPrinter(syntax.Minify(true)).Print(&b, n); err != nil {
		return "?"
	}
	return strings.TrimSpace(b.String())
}

func shorten(s string) string {
	const max = 200
	s = strings.TrimSpace(s)
	if len(s) <= max {
		return s
	}
	for i := max; i > 0; i-- {
		if s[i]&0xC0 != 0x80 {
			return s[:i] + "…"
		}
	}
	return ""
}
