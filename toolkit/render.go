package toolkit

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Field is one "name: value" line at the top of a rendered result, e.g. "exit code: 0".
type Field struct {
	Name  string
	Value string
}

// Section is one named block of output, e.g. stdout, rendered under a "--- name ---" header.
type Section struct {
	Name string
	Body string
	// Omitted is how many bytes of the complete output Body leaves out; 0 means Body is
	// complete. Use [Truncate] or [TruncateTail] to cut and count.
	Omitted int
	// KeptTail says Body is the end of the output (the start was cut), so the truncation
	// marker goes before Body instead of after it.
	KeptTail bool
	// FullPath is where the complete output was saved, for the marker to point at; empty when
	// the rest is not kept anywhere.
	FullPath string
}

// Render lays out a tool result the one way every built-in tool uses, so a model learns it
// once:
//
//	exit code: 1
//	--- stdout ---
//	partial output
//	[truncated: 48213 more bytes not shown; full output in /workspace/.out/1.txt]
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
	}
	if shown == 0 && len(sections) > 0 {
		b.WriteString("(no output)\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// marker tells the model how much it is not seeing and where the rest is.
func marker(s Section) string {
	m := fmt.Sprintf("[truncated: %d more bytes not shown", s.Omitted)
	if s.KeptTail {
		m = fmt.Sprintf("[truncated: the first %d bytes are not shown", s.Omitted)
	}
	if s.FullPath != "" {
		m += "; full output in " + s.FullPath
	}
	return m + "]"
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
