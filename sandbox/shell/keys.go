package shell

import "strings"

// namedKeys maps key names (lower case) to the bytes a terminal sends for them.
var namedKeys = map[string]string{
	"enter": "\r", "return": "\r", "tab": "\t", "space": " ",
	"escape": "\x1b", "esc": "\x1b", "backspace": "\x7f", "bspace": "\x7f",
	"up": "\x1b[A", "down": "\x1b[B", "right": "\x1b[C", "left": "\x1b[D",
	"home": "\x1b[H", "end": "\x1b[F", "delete": "\x1b[3~", "dc": "\x1b[3~",
	"pageup": "\x1b[5~", "ppage": "\x1b[5~", "pagedown": "\x1b[6~", "npage": "\x1b[6~",
}

// ParseKeys reads s as a key sequence: one or more key names separated by
// single spaces, in the style of tmux send-keys. It reports false when any word
// is not a key name, meaning s is ordinary text.
//
// Key names (case-insensitive):
//   - C-a … C-z: Ctrl with a letter (C-c interrupts, C-d is end of input,
//     C-z suspends, C-\ quits); also C-@, C-[, C-], C-^, C-_ and C-Space;
//     "^C" is accepted for C-c and likewise for the others;
//   - Enter (Return), Tab, Space, Escape (Esc), Backspace (BSpace);
//   - Up, Down, Left, Right, Home, End, Delete (DC), PageUp (PPage),
//     PageDown (NPage).
func ParseKeys(s string) ([]byte, bool) {
	if s == "" {
		return nil, false
	}
	var out []byte
	for _, w := range strings.Split(s, " ") {
		b, ok := parseKey(w)
		if !ok {
			return nil, false
		}
		out = append(out, b...)
	}
	return out, true
}

func parseKey(w string) ([]byte, bool) {
	if k, ok := namedKeys[strings.ToLower(w)]; ok {
		return []byte(k), true
	}
	var rest string
	switch {
	case len(w) >= 3 && (w[:2] == "C-" || w[:2] == "c-"):
		rest = w[2:]
	case len(w) == 2 && w[0] == '^':
		rest = w[1:]
	default:
		return nil, false
	}
	if strings.EqualFold(rest, "space") {
		return []byte{0}, true
	}
	if len(rest) != 1 {
		return nil, false
	}
	c := rest[0]
	switch {
	case c >= 'a' && c <= 'z':
		return []byte{c - 'a' + 1}, true
	case c >= 'A' && c <= 'Z':
		return []byte{c - 'A' + 1}, true
	case c >= '@' && c <= '_': // @ [ \ ] ^ _
		return []byte{c - '@'}, true
	}
	return nil, false
}
