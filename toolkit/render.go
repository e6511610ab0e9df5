package toolkit

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Field is one "name: value" line at the top of a rendered result, e.g. "exit code: 0".
type Field struct {
	Name  string // e.g. "exit code"
	Value string // e.g. "0"
}

// Section is one named block of output, e.g. stdout, rendered under a "--- name ---" header.
type Section struct {
	// Name is the header's text, e.g. "stdout".
	Name string
	// Body is the output, or its start when Omitted is non-zero.
	Body string
	// Tail is the end of the output when its middle was cut: it follows the marker. Use
	// [TruncateMiddle] to cut and count.
	Tail string
	// Omitted is how many bytes of the complete output Body and Tail leave out; 0 means Body
	// is complete. Use [TruncateMiddle], [Truncate] or [TruncateTail] to cut and count.
	Omitted int
	// OmittedLines is how many lines the omitted bytes hold, when known (0: not said).
	OmittedLines int
	// KeptTail says Body is the end of the output (the start was cut), so the truncation
	// marker goes before Body instead of after it.
	KeptTail bool
	// FullPath is where the complete output was saved, for the marker to point at; empty when
	// the rest is not kept anywhere.
	FullPath string
	// FileNote says honestly what the saved file lacks, e.g. "it holds only the first 64 MiB"
	// or "it could not be saved: disk full"; it is shown in the marker.
	FileNote string
}

// Render lays out a tool result the one way every built-in tool uses, so a model learns it
// once:
//
//	exit code: 1
//	--- stdout ---
//	first lines
//	[… 188,544 lines (1.2 MB) omitted; the whole output is in /workspace/.out/1.txt: read_file with offset …]
//	last lines
//	--- stderr ---
//	boom
//
// Fields come first, one per line, in order; a field with an empty value is skipped. Each
// section with content follows under its header; sections whose Body is empty and that omit
// nothing are left out, and when no section has content the line "(no output)" stands in for
// them (only if sections were given). Every section ends with a newline, so a body without one
// cannot run into the next header; the returned text has no trailing newline.
func Render(fields []Field, sections ...Section) string {
	var b strings.Builder
	for _, f := range fields {
		if f.Value == "" {
			continue
		}
		b.WriteString(f.Name)
		b.WriteString(": ")
		b.WriteString(f.Value)
		b.WriteByte('\n')
	}
	shown := 0
	for _, s := range sections {
		if s.Body == "" && s.Omitted == 0 {
			continue
		}
		shown++
		b.WriteString("--- ")
		b.WriteString(s.Name)
		b.WriteString(" ---\n")
		if s.KeptTail && s.Omitted > 0 {
			b.WriteString(marker(s))
			b.WriteByte('\n')
		}
		b.WriteString(s.Body)
		if s.Body != "" && !strings.HasSuffix(s.Body, "\n") {
			b.WriteByte('\n')
		}
		if !s.KeptTail && s.Omitted > 0 {
			b.WriteString(marker(s))
			b.WriteByte('\n')
		}
		if s.Tail != "" {
			b.WriteString(s.Tail)
			if !strings.HasSuffix(s.Tail, "\n") {
				b.WriteByte('\n')
			}
		}
	}
	if shown == 0 && len(sections) > 0 {
		b.WriteString("(no output)\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// marker tells the model how much it is not seeing and where the rest is, in one line:
// "[… 188,544 lines (1.2 MB) omitted; the whole output is in FILE: read_file with offset …]".
func marker(s Section) string {
	var m strings.Builder
	m.WriteString("[… ")
	if s.KeptTail {
		m.WriteString("the first ")
	}
	if s.OmittedLines > 0 {
		m.WriteString(groupDigits(int64(s.OmittedLines)))
		m.WriteString(" lines (")
		m.WriteString(humanBytes(int64(s.Omitted)))
		m.WriteString(") omitted")
	} else {
		m.WriteString(humanBytes(int64(s.Omitted)))
		m.WriteString(" omitted")
	}
	switch {
	case s.FullPath != "" && s.FileNote != "":
		m.WriteString("; the output is saved in " + s.FullPath + ", but " + s.FileNote)
	case s.FullPath != "":
		m.WriteString("; the whole output is in " + s.FullPath + ": read_file with offset, or search_files")
	case s.FileNote != "":
		m.WriteString("; " + s.FileNote)
	}
	m.WriteString(" …]")
	return m.String()
}

// groupDigits writes n with thousands separators: 188,544.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// humanBytes writes a byte count the way a person reads it: "912 bytes", "48.2 KB", "1.2 MB".
func humanBytes(n int64) string {
	switch {
	case n == 1:
		return "1 byte"
	case n < 1000:
		return strconv.FormatInt(n, 10) + " bytes"
	case n < 1000*1000:
		return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + " KB"
	case n < 1000*1000*1000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
	}
	return strconv.FormatFloat(float64(n)/1e9, 'f', 1, 64) + " GB"
}

// TruncateMiddle keeps the start and the end of s within limit bytes in all, about half each
// (a build's first error and its summary; a test run's first failure and its totals), and
// returns them with the bytes and lines cut from the middle. Like [Truncate] and
// [TruncateTail] it prefers whole lines and never splits a character. Use the results as
// Section Body, Tail, Omitted and OmittedLines.
func TruncateMiddle(s string, limit int) (head, tail string, omitted, omittedLines int) {
	if limit < 0 {
		limit = 0
	}
	if len(s) <= limit {
		return s, "", 0, 0
	}
	head, _ = Truncate(s, limit/2)
	tail, _ = TruncateTail(s[len(head):], limit-len(head))
	middle := s[len(head) : len(s)-len(tail)]
	return head, tail, len(middle), strings.Count(middle, "\n")
}

// Truncate keeps at most limit bytes from the start of s and returns them with the number of
// bytes cut. It cuts after the last newline within the limit when that keeps at least three
// quarters of it (whole lines read better), otherwise at a UTF-8 boundary, never inside a
// character.
func Truncate(s string, limit int) (kept string, omitted int) {
	if limit < 0 {
		limit = 0
	}
	if len(s) <= limit {
		return s, 0
	}
	cut := limit
	if nl := strings.LastIndexByte(s[:limit], '\n'); nl >= 0 && nl+1 >= limit*3/4 {
		cut = nl + 1
	} else {
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
	}
	return s[:cut], len(s) - cut
}

// TruncateTail keeps at most limit bytes from the end of s (where a failing command prints its
// error) and returns them with the number of bytes cut. Like [Truncate] it prefers to start
// at a line and never splits a character. Pair it with Section.KeptTail.
func TruncateTail(s string, limit int) (kept string, omitted int) {
	if limit < 0 {
		limit = 0
	}
	if len(s) <= limit {
		return s, 0
	}
	start := len(s) - limit
	if nl := strings.IndexByte(s[start:], '\n'); nl >= 0 && nl+1 <= limit/4 {
		start += nl + 1
	} else {
		for start < len(s) && !utf8.RuneStart(s[start]) {
			start++
		}
	}
	return s[start:], start
}

// NumberLines prefixes each line of text with its line number, starting at first, right-aligned
// to the widest number and followed by a tab ("  9\tfoo", " 10\tbar"), the layout of cat -n
// that models already know. A final newline does not start an extra line.
func NumberLines(text string, first int) string {
	if text == "" {
		return ""
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	width := len(strconv.Itoa(first + len(lines) - 1))
	var b strings.Builder
	b.Grow(len(text) + len(lines)*(width+1))
	for i, l := range lines {
		n := strconv.Itoa(first + i)
		b.WriteString(strings.Repeat(" ", width-len(n)))
		b.WriteString(n)
		b.WriteByte('\t')
		b.WriteString(l)
	}
	return b.String()
}
