package shellscan

import (
	"strings"
)

// wrapper describes a program that runs another program given in its arguments, by how to
// find that program among its options: `sudo -u bob rm x` runs rm.
type wrapper struct {
	valueShort string   // short options that take a value (-u USER), as letters
	valueLong  []string // long options that take a value when not given with = (--user USER)
	skip       int      // positional arguments before the program (timeout DURATION, chroot DIR)
	assigns    bool     // NAME=VALUE words before the program are skipped (env)
	input      bool     // the program also gets arguments from input (xargs): an unknown tail
	shellOpt   string   // an option whose value is a shell command line (env -S, flock -c, su -c)
	noRun      string   // options that make it not run the program (command -v)
}

// wrappers are the programs whose argument list holds a program to run. Their own options
// are skipped as their manuals describe; an option not listed here is taken as a flag
// without value, so at worst the program is looked for one word early — and a word that is
// not the real program only ever adds a command to check, it does not hide one.
var wrappers = map[string]wrapper{
	"env":        {valueShort: "uCPS", valueLong: []string{"--unset", "--chdir", "--split-string", "--default-signal", "--ignore-signal", "--block-signal"}, assigns: true, shellOpt: "S"},
	"sudo":       {valueShort: "ugpCDhrtUTR", valueLong: []string{"--user", "--group", "--prompt", "--chdir", "--close-from", "--host", "--role", "--type", "--other-user", "--command-timeout", "--chroot"}, assigns: true},
	"doas":       {valueShort: "uC"},
	"nice":       {valueShort: "n", valueLong: []string{"--adjustment"}},
	"nohup":      {},
	"setsid":     {},
	"time":       {valueShort: "fo", valueLong: []string{"--format", "--output"}},
	"stdbuf":     {valueShort: "ioe", valueLong: []string{"--input", "--output", "--error"}},
	"ionice":     {valueShort: "cnpPu", valueLong: []string{"--class", "--classdata", "--pid", "--pgid", "--uid"}},
	"chrt":       {skip: 1},
	"taskset":    {skip: 1},
	"timeout":    {valueShort: "sk", valueLong: []string{"--signal", "--kill-after"}, skip: 1},
	"chroot":     {valueLong: []string{"--userspec", "--groups"}, skip: 1},
	"flock":      {valueShort: "wEc", valueLong: []string{"--timeout", "--wait", "--conflict-exit-code", "--command"}, skip: 1, shellOpt: "c"},
	"unshare":    {valueShort: "S:G", valueLong: []string{"--setuid", "--setgid", "--wd", "--root"}},
	"nsenter":    {valueShort: "tSGw", valueLong: []string{"--target", "--setuid", "--setgid", "--wd", "--root"}},
	"runuser":    {valueShort: "ugcw", valueLong: []string{"--user", "--group", "--command", "--whitelist-environment"}, shellOpt: "c"},
	"su":         {valueShort: "cgGsw", valueLong: []string{"--command", "--group", "--supp-group", "--shell", "--whitelist-environment"}, shellOpt: "c", skip: 1},
	"strace":     {valueShort: "abeEIoOpPsSuUX", valueLong: []string{"--output", "--attach", "--trace", "--signal", "--user", "--string-limit"}},
	"ltrace":     {valueShort: "aAeElLnopsu", valueLong: []string{"--output", "--library"}},
	"exec":       {valueShort: "a"},
	"command":    {noRun: "vV"},
	"builtin":    {},
	"xargs":      {valueShort: "aEeIiLlnPsd", valueLong: []string{"--arg-file", "--delimiter", "--eof", "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"}, input: true},
	"parallel":   {valueShort: "jSa", valueLong: []string{"--jobs", "--arg-file"}, input: true},
	"watch":      {valueShort: "nqd", valueLong: []string{"--interval", "--differences", "--equexit"}},
	"busybox":    {},
	"fakeroot":   {},
	"catchsegv":  {},
	"caffeinate": {},
}

// shells are the programs that run a shell command line given with -c, a script file, or
// what they read from their input.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "rbash": true, "fish": true, "yash": true, "posh": true}

// inner scans what a program runs in turn.
func (s *scanner) inner(name, prog string, args []Word, via []string, depth int, src source) {
	switch {
	case shells[name]:
		s.shell(name, args, via, depth, src)
		return
	case name == "eval":
		if text, ok := literalJoin(args); ok {
			s.text(text, append(clip(via), "eval"), depth+1)
		} else {
			s.unknown(src, "eval runs text that is only known when it runs")
		}
		return
	case name == "source" || name == ".":
		s.unknown(src, "%s runs the commands of a file, which the policy cannot see", name)
		return
	case name == "trap":
		if len(args) > 0 && !args[0].Dynamic && !strings.HasPrefix(args[0].Text, "-") {
			s.text(args[0].Text, append(clip(via), "trap"), depth+1)
		} else if len(args) > 0 && args[0].Dynamic {
			s.unknown(src, "trap runs text that is only known when it runs")
		}
		return
	case name == "alias":
		s.alias(args, src)
		return
	case name == "unalias":
		for _, a := range args {
			if !a.Dynamic && a.Text != "-a" {
				delete(s.defs.Aliases, a.Text)
			}
		}
		return
	case name == "find":
		s.find(args, via, depth, src)
		return
	case isPython(name):
		s.pythonModule(name, args, via, depth, src)
		return
	}
	w, ok := wrappers[name]
	if !ok {
		return
	}
	label := name
	rest, shellText, ok := w.split(args)
	if !ok {
		s.unknown(src, "%s runs a program named by a value only known when it runs", name)
		return
	}
	if (name == "su" || name == "runuser") && shellText == nil && rest == nil || name == "su" && shellText == nil {
		s.unknown(src, "%s starts a shell that reads its commands from its input", name)
		return
	}
	if name == "su" {
		rest = nil // su's other arguments are the user and the shell's arguments
	}
	if shellText != nil {
		if shellText.Dynamic {
			s.unknown(src, "%s runs a command line only known when it runs", name)
		} else {
			s.text(shellText.Text, append(clip(via), label+" "+w.shellFlag()), depth+1)
		}
	}
	if rest == nil {
		return
	}
	if name == "watch" || (name == "parallel" && len(rest) == 1) {
		// watch joins its arguments into a command line for sh -c.
		if text, ok := literalJoin(rest); ok {
			s.text(text, append(clip(via), label), depth+1)
		} else {
			s.unknown(src, "%s runs a command line only known when it runs", name)
		}
		return
	}
	if w.input {
		// xargs rm: the arguments come from input, unknown here. They may be options
		// (`echo -rf | xargs rm` is rm -rf), so a rule on options can only be Maybe.
		if len(rest) == 0 {
			rest = []Word{{Text: "echo"}}
		}
		rest = append(rest, Word{Text: "<input>", Dynamic: true})
	}
	s.argv(rest, append(clip(via), label), depth+1, src)
}

func (w wrapper) shellFlag() string {
	if w.shellOpt == "" {
		return ""
	}
	return "-" + w.shellOpt
}

// split finds the program a wrapper runs: rest is its argv (nil when there is none), text the
// value of an option that holds a shell command line. ok is false when a word that decides
// where the program is (an option or a name) is dynamic.
func (w wrapper) split(args []Word) (rest []Word, text *Word, ok bool) {
	skip := w.skip
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.Dynamic {
			return nil, nil, false
		}
		t := a.Text
		switch {
		case t == "--":
			return w.positional(args[i+1:], skip), text, true
		case strings.HasPrefix(t, "--"):
			opt, _, hasValue := strings.Cut(t, "=")
			if w.isValueLong(opt) && !hasValue {
				if i+1 < len(args) {
					if w.shellOpt != "" && (opt == "--split-string" || opt == "--command") {
						v := args[i+1]
						text = &v
					}
				}
				i++
			} else if hasValue && (opt == "--split-string" || opt == "--command") && w.shellOpt != "" {
				_, v, _ := strings.Cut(t, "=")
				text = &Word{Text: v}
			}
		case strings.HasPrefix(t, "-") && len(t) > 1:
			for j := 1; j < len(t); j++ {
				c := t[j]
				if w.noRun != "" && strings.IndexByte(w.noRun, c) >= 0 {
					return nil, nil, true // command -v rm: only looks rm up
				}
				if strings.IndexByte(w.valueShort, c) < 0 {
					continue
				}
				var v Word
				if j+1 < len(t) {
					v = Word{Text: t[j+1:]}
				} else if i+1 < len(args) {
					i++
					v = args[i]
				}
				if w.shellOpt != "" && strings.IndexByte(w.shellOpt, c) >= 0 {
					vv := v
					text = &vv
				}
				break
			}
		case w.assigns && isAssignment(t):
		default:
			r := w.positional(args[i:], skip)
			return r, text, true
		}
	}
	return nil, text, true
}

// positional skips the wrapper's own positional arguments (timeout's DURATION) and returns
// the program's argv, or nil when none is left.
func (w wrapper) positional(args []Word, skip int) []Word {
	if skip > len(args) {
		return nil
	}
	args = args[skip:]
	if len(args) == 0 {
		return nil
	}
	return args
}

func (w wrapper) isValueLong(opt string) bool {
	for _, l := range w.valueLong {
		if l == opt {
			return true
		}
	}
	return false
}

func isAssignment(t string) bool {
	name, _, ok := strings.Cut(t, "=")
	return ok && isIdentifier(name)
}

// literalJoin joins words with spaces, as eval and watch do, or reports a dynamic one.
func literalJoin(ws []Word) (string, bool) {
	parts := make([]string, len(ws))
	for i, w := range ws {
		if w.Dynamic {
			return "", false
		}
		parts[i] = w.Text
	}
	return strings.Join(parts, " "), true
}

// shell scans `bash -c TEXT`, `bash script`, and a shell reading its input.
func (s *scanner) shell(name string, args []Word, via []string, depth int, src source) {
	command := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.Dynamic {
			s.unknown(src, "%s is given an argument only known when it runs", name)
			return
		}
		t := a.Text
		switch {
		case t == "--" || t == "-":
			i++
			if i < len(args) {
				s.shellOperand(name, args[i], command, via, depth, src)
			} else if !command {
				s.unknown(src, "%s reads its commands from its input, which the policy cannot see", name)
			}
			return
		case t == "-o" || t == "+o" || t == "-O" || t == "+O" || t == "--rcfile" || t == "--init-file":
			i++
		case strings.HasPrefix(t, "--"):
		case (strings.HasPrefix(t, "-") || strings.HasPrefix(t, "+")) && len(t) > 1:
			if strings.Contains(t[1:], "c") && t[0] == '-' {
				command = true
			}
			if strings.Contains(t[1:], "s") && t[0] == '-' && !command {
				s.unknown(src, "%s -s reads its commands from its input, which the policy cannot see", name)
				return
			}
		default:
			s.shellOperand(name, a, command, via, depth, src)
			return
		}
	}
	if command {
		s.unknown(src, "%s -c is given no command", name)
		return
	}
	s.unknown(src, "%s reads its commands from its input, which the policy cannot see", name)
}

func (s *scanner) shellOperand(name string, a Word, command bool, via []string, depth int, src source) {
	switch {
	case a.Dynamic:
		s.unknown(src, "%s runs %s, only known when it runs", name, a.Text)
	case command:
		s.text(a.Text, append(clip(via), name+" -c"), depth+1)
	default:
		s.unknown(src, "%s runs the script file %s, whose commands the policy cannot see", name, a.Text)
	}
}

// find scans the commands of -exec, -execdir, -ok and -okdir.
func (s *scanner) find(args []Word, via []string, depth int, src source) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.Dynamic || (a.Text != "-exec" && a.Text != "-execdir" && a.Text != "-ok" && a.Text != "-okdir") {
			continue
		}
		j := i + 1
		for j < len(args) && (args[j].Dynamic || (args[j].Text != ";" && args[j].Text != "+")) {
			j++
		}
		s.argv(args[i+1:j], append(clip(via), "find "+a.Text), depth+1, src)
		i = j
	}
}

// alias records `alias name=value` definitions; a value only known at run time is Unknown.
func (s *scanner) alias(args []Word, src source) {
	for _, a := range args {
		if a.Dynamic {
			s.unknown(src, "alias defines a name from a value only known when it runs")
			continue
		}
		name, value, ok := strings.Cut(a.Text, "=")
		if !ok || strings.HasPrefix(name, "-") {
			continue
		}
		s.defs.Aliases[name] = value
		// Defining is not running, but a later call may come where the definition is not
		// followed (another session): check the replacement now as well.
		s.text(value, []string{"alias " + name}, 1)
	}
}

// isPython reports python, python3, python3.12 and the like.
func isPython(name string) bool {
	rest, ok := strings.CutPrefix(name, "python")
	return ok && strings.Trim(rest, "0123456789.") == ""
}

// pythonModule scans `python -m MODULE ARGS`, which runs a module as a program: `python3 -m
// pip install x` is pip install x, and a rule on pip must see it.
func (s *scanner) pythonModule(name string, args []Word, via []string, depth int, src source) {
	label := append(clip(via), name+" -m")
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.Dynamic {
			return
		}
		t := a.Text
		if t == "-" || !strings.HasPrefix(t, "-") {
			return // a script or standard input: Python code, not a program this policy sees into
		}
		if strings.HasPrefix(t, "--") {
			continue // --version, --help: no value
		}
		// A cluster of one-letter options, as in -um pip or -Bc code.
		for j := 1; j < len(t); j++ {
			switch t[j] {
			case 'm':
				if j+1 < len(t) {
					s.argv(append([]Word{{Text: t[j+1:]}}, args[i+1:]...), label, depth+1, src)
				} else if i+1 < len(args) {
					s.argv(args[i+1:], label, depth+1, src)
				}
				return
			case 'c':
				return // the rest is Python code
			case 'X', 'W':
				if j == len(t)-1 {
					i++ // the value is the next word
				}
				j = len(t)
			}
		}
	}
}
