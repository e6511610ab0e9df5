package shell

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name, in, want string
		suffixOnly     bool // want is only the end of the output
	}{
		{"plain text passes unchanged", "hello\n  world\n\n", "hello\n  world\n\n", false},
		{"CRLF becomes LF", "a\r\nb\r\n", "a\nb\n", false},
		{"CR CR LF from a program's CRLF through onlcr becomes one LF", "a\r\r\n", "a\n", false},
		{"lone CR becomes LF so progress steps stay readable", "10%\r20%\r\n", "10%\n20%\n", false},
		{"trailing lone CR is dropped", "done\r", "done", false},
		{"colour codes are removed", "\x1b[1;31mred\x1b[0m plain", "red plain", false},
		{"cursor movement is removed", "a\x1b[2K\x1b[10;20Hb", "ab", false},
		{"private mode switches are removed", "\x1b[?2004hx\x1b[?1l", "x", false},
		{"OSC title ended by BEL is removed", "\x1b]0;title\x07text", "text", false},
		{"OSC ended by ST is removed", "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link", false},
		{"DCS is removed", "\x1bPq#0;2;0;0;0\x1b\\after", "after", false},
		{"charset selection is removed", "\x1b(Bplain\x1b)0", "plain", false},
		{"two-byte escapes are removed", "\x1b=\x1b>\x1bMok", "ok", false},
		{"bell, backspace and other controls are dropped", "a\x07b\x08c\x00d\x7f", "abcd", false},
		{"tab is kept", "a\tb", "a\tb", false},
		{"UTF-8 is kept", "héllo € 𝄞", "héllo € 𝄞", false},
		{"invalid byte becomes U+FFFD", "a\xffb", "a\uFFFDb", false},
		{"lone lead byte at the end becomes U+FFFD", "aaa\xe2", "aaa\uFFFD", false},
		{"truncated sequence before ASCII becomes U+FFFD", "\xe2\x82x", "\uFFFD\uFFFDx", false},
		{"overlong encoding is invalid", "\xc0\xafz", "\uFFFD\uFFFDz", false},
		{"UTF-8 encoded C1 controls are dropped", "a\u009bb\u0085c", "abc", false},
		{"escape interrupted by newline keeps the newline", "a\x1b[12\nb", "a\nb", false},
		{"unterminated OSC is bounded and does not eat the rest", "\x1b]" + strings.Repeat("x", maxStringLen) + "\nthe rest", "\nthe rest", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Clean([]byte(tt.in))
			if tt.suffixOnly {
				if !strings.HasSuffix(got, tt.want) || len(got) > len(tt.want)+10 {
					t.Fatalf("Clean(%.20q...) = %q, want it to end with %q", tt.in, got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.want)
			}
			// The same result whatever the split into reads.
			for cut := 0; cut <= len(tt.in); cut++ {
				if got := cleanSplit([]byte(tt.in), cut); got != tt.want {
					t.Fatalf("split at %d: got %q, want %q", cut, got, tt.want)
				}
			}
		})
	}
}

func cleanSplit(in []byte, cut int) string {
	var c Cleaner
	out := c.Append(nil, in[:cut])
	out = c.Append(out, in[cut:])
	return string(c.Flush(out))
}

func FuzzClean(f *testing.F) {
	seeds := []string{
		"plain\r\n", "\x1b[31mred\x1b[0m", "\x1b]0;t\x07x", "\x1b]8;;u\x1b\\l", "€ split",
		"a\xe2", "\xf0\x9d\x84\x9e", "\xff\xfe", "\r\r\n\r", "\x1b[", "\x1b", "\x1bP\x1b\x1b\\",
		"\u009b31m", "a\x08b\x00", strings.Repeat("a", 8191) + "\xe2",
	}
	for i, s := range seeds {
		f.Add([]byte(s), i)
	}
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		whole := Clean(in)
		if !utf8.ValidString(whole) {
			t.Fatalf("output is not valid UTF-8: %q", whole)
		}
		for _, r := range whole {
			if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
				t.Fatalf("control character %U left in %q", r, whole)
			}
		}
		if again := Clean([]byte(whole)); again != whole {
			t.Fatalf("not idempotent: %q then %q", whole, again)
		}
		if len(in) > 0 {
			cut = ((cut % len(in)) + len(in)) % len(in)
			if split := cleanSplit(in, cut); split != whole {
				t.Fatalf("split at %d gives %q, whole gives %q", cut, split, whole)
			}
		}
		// Plain printable ASCII and newlines must come through untouched.
		if isPlain(in) && whole != string(in) {
			t.Fatalf("plain text changed: %q -> %q", in, whole)
		}
	})
}

func isPlain(p []byte) bool {
	return len(bytes.TrimFunc(p, func(r rune) bool { return r == '\n' || (r >= 0x20 && r < 0x7f) })) == 0
}

func TestOutputBuffer(t *testing.T) {
	t.Run("small output is returned whole", func(t *testing.T) {
		o := newOutputBuffer(100)
		o.write([]byte("a\n"))
		o.write([]byte("b\n"))
		if got, _, dropped, _ := o.take(); got != "a\nb\n" || dropped != 0 {
			t.Fatalf("got %q dropped %d", got, dropped)
		}
	})
	t.Run("long output keeps head and tail at line boundaries", func(t *testing.T) {
		o := newOutputBuffer(1000)
		var all strings.Builder
		for i := range 50000 {
			line := strings.Repeat("x", i%7) + "\n"
			all.WriteString(line)
			o.write([]byte(line))
			if len(o.head)+cap(o.tail) > 4*1000+8192 {
				t.Fatalf("memory not bounded: head %d, tail cap %d", len(o.head), cap(o.tail))
			}
		}
		got, cut, droppedBytes, droppedLines := o.take()
		if len(got) > 1100 {
			t.Fatalf("output %d bytes, want about 1000", len(got))
		}
		head, rest, ok := strings.Cut(got, "[... ")
		if !ok {
			t.Fatalf("no cut marker in %q", got)
		}
		if cut != len(head) {
			t.Fatalf("Cut is %d, but the marker starts at %d", cut, len(head))
		}
		_, tail, _ := strings.Cut(rest, "...]\n")
		if !strings.HasPrefix(all.String(), head) || !strings.HasSuffix(all.String(), tail) {
			t.Fatal("head or tail is not the real start or end of the output")
		}
		if int64(len(head)+len(tail))+droppedBytes != int64(all.Len()) {
			t.Fatalf("kept %d + dropped %d != total %d", len(head)+len(tail), droppedBytes, all.Len())
		}
		if int64(strings.Count(head+tail, "\n"))+droppedLines != 50000 {
			t.Fatalf("line count does not add up: dropped %d", droppedLines)
		}
	})
	t.Run("one huge line is cut without splitting characters", func(t *testing.T) {
		o := newOutputBuffer(301)
		for range 1000 {
			o.write([]byte("€"))
		}
		got, _, _, _ := o.take()
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 after cut: %q", got)
		}
	})
}

func TestParseKeys(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"C-c", "\x03", true},
		{"c-D", "\x04", true},
		{"C-z", "\x1a", true},
		{"^C", "\x03", true},
		{`C-\`, "\x1c", true},
		{"Enter", "\r", true},
		{"up Enter", "\x1b[A\r", true},
		{"Escape", "\x1b", true},
		{"Ann", "", false},
		{"C-c please", "", false},
		{"C-cc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := ParseKeys(tt.in)
		if ok != tt.ok || string(got) != tt.want {
			t.Errorf("ParseKeys(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
