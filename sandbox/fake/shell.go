package fake

import (
	"bytes"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// playShell is bash on a terminal, as package sandbox/shell drives it, as
// a scripted process: it reads the session's bootstrap line to learn the
// marker token, reports itself ready with an init marker, and answers
// each typed command line from the script, framed by the start and end
// markers bash would print. Output goes through a terminal's "\n" ->
// "\r\n" translation, as on a real pty.

var (
	tokenRe = regexp.MustCompile(`\\033\]sbk;([0-9a-f]+);`)
	evalRe  = regexp.MustCompile(`\\builtin eval (\$'[^']*'|"\$[A-Za-z0-9_]+")`)
	chunkRe = regexp.MustCompile(`^(__sbk[0-9a-f]+_c)(\+?=)(\$'[^']*')$`)
)

// isShell reports whether args start a bash session (sandbox/shell).
func isShell(args []string, pty bool) bool {
	return pty && len(args) >= 2 && strings.Join(args[1:], " ") == "--norc --noprofile --noediting -i"
}

// unquoteANSI decodes the $'...' words the session types (printable ASCII
// and \xHH escapes only).
func unquoteANSI(w string) string {
	w = strings.TrimSuffix(strings.TrimPrefix(w, "$'"), "'")
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		if w[i] == '\\' && i+3 < len(w) && w[i+1] == 'x' {
			if v, err := strconv.ParseUint(w[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(w[i])
	}
	return b.String()
}

type fakeBash struct {
	fk     *Fake
	p      *proc
	ws     string // the workspace as the session sees it
	token  string
	cwd    string // absolute, as bash shows $PWD
	status int
	chunks string // a long command stored in pieces
	// running is set while a scripted command is still running.
	running bool
	ended   bool
	mu      sync.Mutex // the state above: signals arrive on another goroutine
}

// playShell serves the session until it exits or its terminal closes and
// returns the shell's exit status. cwd is its start directory.
func (fk *Fake) playShell(p *proc, cwd string) int {
	b := &fakeBash{fk: fk, p: p, ws: WorkspacePath, cwd: cwd}
	p.setSignalHandler(func(sig int, foreground bool) bool {
		if sig != sigINT {
			return false
		}
		// Ctrl-C reaches the command in the foreground; an interactive
		// bash itself ignores SIGINT.
		if foreground {
			b.interrupt()
		}
		return true
	})
	var buf []byte
	in := make([]byte, 32<<10)
	for !b.isEnded() {
		n, err := p.stdin.Read(in)
		buf = append(buf, in[:n]...)
		buf = b.consume(buf)
		if err != nil {
			break
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status
}

func (b *fakeBash) isEnded() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended
}

func (b *fakeBash) write(s string) { _, _ = b.p.stdout.Write([]byte(s)) }

func (b *fakeBash) marker(kind string, withState bool) string {
	m := "\x1b]sbk;" + b.token + ";" + kind
	if withState {
		m += ";" + strconv.Itoa(b.status) + ";" + b.cwd
	}
	return m + "\a"
}

func terminal(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// consume handles the complete lines (or keys) in buf and returns the rest.
func (b *fakeBash) consume(buf []byte) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(buf) > 0 && !b.ended {
		if b.running {
			// Input for the running command: keys act at once, text on Enter.
			if i := bytes.IndexAny(buf, "\x03\x04"); i >= 0 && bytes.IndexAny(buf[:i], "\r\n") < 0 {
				buf = buf[i+1:]
				b.interruptLocked()
				continue
			}
			i := bytes.IndexAny(buf, "\r\n")
			if i < 0 {
				return buf
			}
			line := string(buf[:i])
			buf = buf[i+1:]
			b.answer(line, true)
			continue
		}
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return buf
		}
		line := string(buf[:i])
		buf = buf[i+1:]
		b.line(line)
	}
	return buf
}

// interrupt ends a running command as Ctrl-C does.
func (b *fakeBash) interrupt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.interruptLocked()
}

func (b *fakeBash) interruptLocked() {
	if !b.running {
		return
	}
	b.running = false
	b.status = 130
	b.write("^C\r\n" + b.marker("p", true))
}

// line handles one line typed while no command runs.
func (b *fakeBash) line(line string) {
	if b.token == "" {
		m := tokenRe.FindStringSubmatch(line)
		if m == nil {
			return // not our bootstrap; bash would run it, the fake ignores it
		}
		b.token = m[1]
		b.write(b.marker("i", true))
		return
	}
	if m := chunkRe.FindStringSubmatch(line); m != nil {
		if m[2] == "=" {
			b.chunks = ""
		}
		b.chunks += unquoteANSI(m[3])
		return
	}
	m := evalRe.FindStringSubmatch(line)
	if m == nil {
		return
	}
	cmd := b.chunks
	if strings.HasPrefix(m[1], "$'") {
		cmd = unquoteANSI(m[1])
	}
	b.chunks = ""
	b.write(b.marker("s", false))
	b.answer(cmd, false)
}

// answer runs a command (or input to the running one) from the script.
func (b *fakeBash) answer(text string, input bool) {
	op := "shell.run"
	if input {
		op = "shell.input"
	}
	fk := b.fk
	idx := fk.rec.add(fk.Clock, Call{Kind: KindShell, Op: op, Text: text, Dir: b.cwd, Policy: fk.policy(0, nil)})
	f, ok := find(&fk.Script.mu, fk.Script.shells, strings.TrimSpace(text))
	var rep ShellReply
	if ok {
		fk.rec.markScripted(idx)
		rep = f(b.p.ctx, Shell{Text: text, Input: input, Cwd: b.cwd, Workspace: fk.Workspace()})
	} else {
		msg := unscripted("shell", strings.TrimSpace(text))
		fk.unscripted(msg)
		fk.rec.setErr(idx, "exit 127")
		rep = ShellReply{Output: "bash: " + msg + "\n", ExitCode: 127}
	}
	if rep.Cwd != "" {
		if path.IsAbs(rep.Cwd) {
			b.cwd = path.Clean(rep.Cwd)
		} else {
			b.cwd = path.Join(b.ws, rep.Cwd)
		}
	}
	out := terminal(rep.Output)
	if rep.Exit {
		b.running, b.ended = false, true
		b.status = rep.ExitCode & 255
		b.write(out)
		return
	}
	if rep.Running {
		b.running = true
		b.write(out)
		return
	}
	b.running = false
	b.status = rep.ExitCode & 255
	b.write(out + b.marker("e", true) + b.marker("p", true))
}
