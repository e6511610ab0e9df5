package shell

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// The protocol spoken to bash over the terminal.
//
// Every marker the shell prints is an OSC escape sequence
//
//	ESC ] sbk ; <token> ; <kind> [; <status> ; <cwd>] BEL
//
// so a marker that ever slipped past the parser would still be stripped as
// an escape sequence. The token is random per session. The command lines we
// type spell the ESC as the four characters `\033` inside a printf format, so
// the terminal's echo of our own input (if the user turns echo back on, or a
// freshly exec'd bash has readline) can never look like a marker.
//
// Kinds:
//
//	s  start: printed just before the user's command runs; everything before
//	   it (prompts, echo, job notices) is noise and dropped
//	e  end: printed after the command, with its exit status and $PWD
//	p  prompt: printed by the PROMPT_COMMAND hook before every prompt; it
//	   completes a command whose line bash abandoned (Ctrl-C kills a foreground
//	   job, some parse errors), where the end marker never runs
//	i  init: printed by the hook in a bash that has not been set up yet: the
//	   first one at start, and the new one after `exec bash` or inside a
//	   nested interactive `bash`
const (
	kindStart  = 's'
	kindEnd    = 'e'
	kindPrompt = 'p'
	kindInit   = 'i'
)

// maxLine bounds the length of one line we type: the terminal's canonical mode
// keeps at most 4095 bytes per line and silently drops the rest.
const maxLine = 3500

// protocol holds the per-session names derived from the random token.
type protocol struct {
	token  string
	prefix []byte // ESC ] sbk ; token ;
	fn     string // prefix of our shell function and variable names
}

func newProtocol() protocol {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	return protocol{
		token:  tok,
		prefix: []byte("\x1b]sbk;" + tok + ";"),
		fn:     "__sbk" + tok,
	}
}

// printfMarker is a printf command (protected from aliases and functions)
// printing a marker of the given kind, with status and cwd when withState.
func (p protocol) printfMarker(kind byte, status string) string {
	if status == "" {
		return `\builtin printf '\033]sbk;` + p.token + `;` + string(kind) + `\007'`
	}
	return `\builtin printf '\033]sbk;` + p.token + `;` + string(kind) + `;%d;%s\007' ` + status + ` "${PWD-}"`
}

// bootstrap is the line typed into a freshly started bash. It defines:
//
//	<fn>_r N   returns N, to restore $? before the next command
//	<fn>_i     puts a bash into the state we need: no prompts, no line
//	           editing (readline would echo our input), no history (our lines
//	           would fill it), no history expansion, no terminal echo
//	<fn>_h     the PROMPT_COMMAND hook (see the kinds above); it runs as
//	           "<fn>_h && :" so returning the saved status neither trips
//	           set -e nor hides $? from a PROMPT_COMMAND the user added
//
// and exports them with PROMPT_COMMAND, so that a bash replacing this one
// (`exec bash`) or started inside it sets itself up and reports in.
func (p protocol) bootstrap() string {
	f := p.fn
	return f + `_r() { return "$1"; }; ` +
		f + `_i() { ` + f + `_up=1; PS1=''; PS2=''; PS0=''; set +o emacs +o vi +o history +H; unset HISTFILE; \command stty -echo 2>/dev/null; }; ` +
		f + `_h() { local s=$?; if [[ -z ${` + f + `_up-} ]]; then ` + f + `_i; ` + p.printfMarker(kindInit, `"$s"`) +
		`; else ` + p.printfMarker(kindPrompt, `"$s"`) + `; fi; return "$s"; }; ` +
		`export -f ` + f + `_r ` + f + `_i ` + f + `_h; export PROMPT_COMMAND='` + f + `_h && :'` + "\n"
}

// commandLines returns the lines to type to run command, with $? set to
// lastStatus first so `false` then `echo $?` behaves as at a terminal.
//
// The command runs through eval of one ANSI-C quoted word, so whatever it
// contains (heredocs, unbalanced quotes, `(a`) is parsed by eval as a whole:
// a syntax error is eval's error and never leaves bash on a continuation
// prompt. eval runs at top level, not in a function, so `declare`, `local`
// errors and `return` behave as typed at a prompt. Long commands are first
// stored in a variable in pieces, because of the terminal's line limit.
func (p protocol) commandLines(command string, lastStatus int) string {
	var b strings.Builder
	word := ansiQuote(command)
	if len(word) > maxLine {
		v := p.fn + "_c"
		for i, chunk := range splitForQuoting(command, maxLine/4-4) {
			op := "+="
			if i == 0 {
				op = "="
			}
			b.WriteString(v + op + ansiQuote(chunk) + "\n")
		}
		word = `"$` + v + `"`
	}
	b.WriteString(p.printfMarker(kindStart, "") + "; ")
	if lastStatus != 0 {
		b.WriteString(`{ ` + p.fn + `_r ` + strconv.Itoa(lastStatus&255) + ` && :; } 2>/dev/null; `)
	}
	b.WriteString(`\builtin eval ` + word + "; ")
	// The tail runs with stderr discarded so `set -x` does not trace it. It
	// also puts our hook back at the front of PROMPT_COMMAND if the user
	// replaced it, keeping what they set.
	b.WriteString(`{ ` + p.printfMarker(kindEnd, `"$?"`) + `; [[ ${PROMPT_COMMAND-} == *` + p.fn + `_h* ]] || PROMPT_COMMAND=$'` +
		p.fn + `_h && :\n'"${PROMPT_COMMAND-}"; `)
	if strings.HasPrefix(word, `"$`) {
		b.WriteString(`\builtin unset ` + p.fn + `_c; `)
	}
	b.WriteString("} 2>/dev/null\n")
	return b.String()
}

// ansiQuote quotes s as one bash $'...' word made of printable ASCII only:
// control bytes, non-ASCII bytes and characters special to the quoting or to
// history expansion are written as \xHH, so the line we type is never
// altered by the terminal (no ^C, no line editing characters) and bytes that
// are not UTF-8 arrive unchanged.
func ansiQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 3)
	b.WriteString("$'")
	const hexdigits = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '\\' && c != '\'' && c != '!' {
			b.WriteByte(c)
			continue
		}
		b.WriteString(`\x`)
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	b.WriteByte('\'')
	return b.String()
}

// splitForQuoting cuts s into pieces of at most n bytes.
func splitForQuoting(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// marker is one parsed marker.
type marker struct {
	kind   byte
	status int
	cwd    string
}

// parseMarker parses the part of a marker between the prefix and the BEL.
func parseMarker(body []byte) (marker, bool) {
	if len(body) == 0 {
		return marker{}, false
	}
	m := marker{kind: body[0]}
	if len(body) == 1 {
		return m, m.kind == kindStart
	}
	rest := body[1:]
	if rest[0] != ';' {
		return marker{}, false
	}
	rest = rest[1:]
	i := bytes.IndexByte(rest, ';')
	if i < 0 {
		return marker{}, false
	}
	st, err := strconv.Atoi(string(rest[:i]))
	if err != nil {
		return marker{}, false
	}
	m.status = st
	// The terminal turned any newline in the path into "\r\n".
	m.cwd = strings.ReplaceAll(string(rest[i+1:]), "\r\n", "\n")
	return m, true
}
