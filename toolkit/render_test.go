package toolkit

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRender(t *testing.T) {
	tests := []struct {
		name     string
		fields   []Field
		sections []Section
		want     string
	}{
		{
			name:     "exit code and both streams",
			fields:   []Field{{"exit code", "1"}},
			sections: []Section{{Name: "stdout", Body: "hello\n"}, {Name: "stderr", Body: "boom"}},
			want:     "exit code: 1\n--- stdout ---\nhello\n--- stderr ---\nboom",
		},
		{
			name:     "empty stream is left out",
			fields:   []Field{{"exit code", "0"}},
			sections: []Section{{Name: "stdout", Body: "ok\n"}, {Name: "stderr"}},
			want:     "exit code: 0\n--- stdout ---\nok",
		},
		{
			name:     "no output at all says so",
			fields:   []Field{{"exit code", "0"}},
			sections: []Section{{Name: "stdout"}, {Name: "stderr"}},
			want:     "exit code: 0\n(no output)",
		},
		{
			name:   "empty field values are skipped",
			fields: []Field{{"exit code", "0"}, {"signal", ""}, {"duration", "1.2s"}},
			want:   "exit code: 0\nduration: 1.2s",
		},
		{
			name:     "head kept: marker after, with where the rest is",
			fields:   []Field{{"exit code", "0"}},
			sections: []Section{{Name: "stdout", Body: "line 1\nline 2\n", Omitted: 4096, FullPath: "/workspace/.out/1.txt"}},
			want:     "exit code: 0\n--- stdout ---\nline 1\nline 2\n[… 4.1 KB omitted; the whole output is in /workspace/.out/1.txt: read_file with offset, or search_files …]",
		},
		{
			name:     "head and tail: the marker between, with lines, size and file",
			sections: []Section{{Name: "output", Body: "1\n2\n", Tail: "199999\n200000\n", Omitted: 1_288_881, OmittedLines: 199_996, FullPath: "/w/1.txt"}},
			want:     "--- output ---\n1\n2\n[… 199,996 lines (1.3 MB) omitted; the whole output is in /w/1.txt: read_file with offset, or search_files …]\n199999\n200000",
		},
		{
			name:     "a cut file is said",
			sections: []Section{{Name: "output", Body: "a\n", Tail: "z", Omitted: 5_000_000, FullPath: "/w/1.txt", FileNote: "it holds only the start"}},
			want:     "--- output ---\na\n[… 5.0 MB omitted; the output is saved in /w/1.txt, but it holds only the start …]\nz",
		},
		{
			name:     "tail kept: marker before",
			sections: []Section{{Name: "stderr", Body: "fatal: x", Omitted: 10, KeptTail: true}},
			want:     "--- stderr ---\n[… the first 10 bytes omitted …]\nfatal: x",
		},
		{
			name:     "everything cut still shows the marker",
			sections: []Section{{Name: "stdout", Omitted: 5}},
			want:     "--- stdout ---\n[… 5 bytes omitted …]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Render(tt.fields, tt.sections...); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		limit       int
		wantKept    string
		wantOmitted int
	}{
		{"fits", "abc", 3, "abc", 0},
		{"cuts at the limit", "abcdef", 4, "abcd", 2},
		{"prefers a line end near the limit", "aaaaaaa\nbbbbbbb", 10, "aaaaaaa\n", 7},
		{"ignores a line end far from the limit", "a\nbbbbbbbbbbbb", 10, "a\nbbbbbbbb", 4},
		{"never splits a character", "aé", 2, "a", 2},
		{"zero limit", "abc", 0, "", 3},
		{"negative limit", "abc", -1, "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, omitted := Truncate(tt.in, tt.limit)
			if kept != tt.wantKept || omitted != tt.wantOmitted {
				t.Errorf("Truncate(%q, %d) = %q, %d; want %q, %d", tt.in, tt.limit, kept, omitted, tt.wantKept, tt.wantOmitted)
			}
			if len(kept)+omitted != len(tt.in) || !utf8.ValidString(kept) {
				t.Errorf("kept and omitted must add up to the input and kept must be valid UTF-8")
			}
		})
	}
}

func TestTruncateMiddle(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 1000; i++ {
		b.WriteString(strings.Repeat("é", i%5) + "\n")
	}
	in := b.String()
	head, tail, omitted, lines := TruncateMiddle(in, 300)
	if !strings.HasPrefix(in, head) || !strings.HasSuffix(in, tail) || len(head)+len(tail)+omitted != len(in) {
		t.Fatalf("head %d + tail %d + omitted %d != %d, or not the real start and end", len(head), len(tail), omitted, len(in))
	}
	if len(head)+len(tail) > 300 || len(head) < 100 || len(tail) < 100 {
		t.Errorf("kept head %d and tail %d of a 300 byte budget", len(head), len(tail))
	}
	if strings.Count(head, "\n")+strings.Count(tail, "\n")+lines != 1000 {
		t.Errorf("lines do not add up: %d omitted", lines)
	}
	if !strings.HasSuffix(head, "\n") || !utf8.ValidString(tail) {
		t.Errorf("head does not end a line or tail splits a character")
	}
	if h, tl, o, _ := TruncateMiddle("short", 10); h != "short" || tl != "" || o != 0 {
		t.Errorf("short input was cut")
	}
}

func TestTruncateTail(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		limit       int
		wantKept    string
		wantOmitted int
	}{
		{"fits", "abc", 3, "abc", 0},
		{"keeps the end", "abcdef", 4, "cdef", 2},
		{"prefers a line start near the cut", "aaaaaaa\nbbbbbbb", 9, "bbbbbbb", 8},
		{"never splits a character", "éa", 2, "a", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, omitted := TruncateTail(tt.in, tt.limit)
			if kept != tt.wantKept || omitted != tt.wantOmitted {
				t.Errorf("TruncateTail(%q, %d) = %q, %d; want %q, %d", tt.in, tt.limit, kept, omitted, tt.wantKept, tt.wantOmitted)
			}
			if len(kept)+omitted != len(tt.in) || !utf8.ValidString(kept) {
				t.Errorf("kept and omitted must add up to the input and kept must be valid UTF-8")
			}
		})
	}
}

func TestNumberLines(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		first int
		want  string
	}{
		{"numbers from the offset", "a\nb\n", 9, " 9\ta\n10\tb\n"},
		{"last line without newline", "a\nb", 1, "1\ta\n2\tb"},
		{"empty", "", 1, ""},
		{"blank lines count", "\n\n", 1, "1\t\n2\t\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NumberLines(tt.text, tt.first); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := NumberLines(strings.Repeat("x\n", 100), 1); !strings.HasPrefix(got, "  1\tx\n") || !strings.HasSuffix(got, "100\tx\n") {
		t.Errorf("alignment to the widest number: %q...", got[:12])
	}
}
