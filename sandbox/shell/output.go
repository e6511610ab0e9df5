package shell

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// outputBuffer keeps the cleaned output of a command that has not been handed
// to the caller yet, in bounded memory: the first half of the budget is kept as
// the head, the rest as a sliding tail, and everything in between is counted
// and dropped. A command printing gigabytes costs at most max bytes (plus the
// tail's slack before it is compacted).
type outputBuffer struct {
	max          int
	head         []byte
	tail         []byte
	droppedBytes int64
	droppedLines int64
}

func newOutputBuffer(max int) *outputBuffer {
	return &outputBuffer{max: max}
}

func (o *outputBuffer) len() int { return len(o.head) + len(o.tail) }

func (o *outputBuffer) write(p []byte) {
	if room := o.max/2 - len(o.head); room > 0 && o.droppedBytes == 0 && len(o.tail) == 0 {
		n := min(room, len(p))
		o.head = append(o.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	tailMax := o.max - o.max/2
	if len(p) >= tailMax {
		o.drop(o.tail)
		o.tail = o.tail[:0]
		o.drop(p[:len(p)-tailMax])
		p = p[len(p)-tailMax:]
	}
	o.tail = append(o.tail, p...)
	if excess := len(o.tail) - tailMax; excess > 0 {
		o.drop(o.tail[:excess])
		// Compact only when the slack is large so appends stay amortised O(1).
		o.tail = o.tail[excess:]
		if cap(o.tail) > 2*tailMax+4096 || len(o.tail) < cap(o.tail)/4 {
			o.tail = append([]byte(nil), o.tail...)
		}
	}
}

func (o *outputBuffer) drop(p []byte) {
	o.droppedBytes += int64(len(p))
	o.droppedLines += int64(bytes.Count(p, []byte{'\n'}))
}

// take returns the buffered text, with a marker where output was cut, and
// empties the buffer. The cut is moved to line boundaries when the kept parts
// contain newlines, and never splits a UTF-8 character.
func (o *outputBuffer) take() (text string, cut int, droppedBytes, droppedLines int64) {
	if o.droppedBytes == 0 {
		text = string(o.head) + string(o.tail)
		o.reset()
		return text, 0, 0, 0
	}
	head, tail := o.head, o.tail
	if i := bytes.LastIndexByte(head, '\n'); i >= 0 {
		o.drop(head[i+1:])
		head = head[:i+1]
	} else {
		cut := runeStart(head, len(head))
		o.drop(head[cut:])
		head = head[:cut]
	}
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i < len(tail)-1 {
		o.drop(tail[:i+1])
		tail = tail[i+1:]
	} else {
		cut := 0
		for cut < len(tail) && !utf8.RuneStart(tail[cut]) {
			cut++
		}
		o.drop(tail[:cut])
		tail = tail[cut:]
	}
	sep := ""
	if len(head) > 0 && head[len(head)-1] != '\n' {
		sep = "\n"
	}
	marker := fmt.Sprintf("%s[... %d lines (%d bytes) cut: output over %d bytes, head and tail kept ...]\n",
		sep, o.droppedLines, o.droppedBytes, o.max)
	text = string(head) + marker + string(tail)
	cut = len(head) + len(sep)
	droppedBytes, droppedLines = o.droppedBytes, o.droppedLines
	o.reset()
	return text, cut, droppedBytes, droppedLines
}

// runeStart returns the largest index <= n at which p holds a complete UTF-8
// character boundary.
func runeStart(p []byte, n int) int {
	i := n
	for i > 0 && n-i < utf8.UTFMax && !utf8.RuneStart(p[i-1]) {
		i--
	}
	if i > 0 && utf8.RuneStart(p[i-1]) {
		r := i - 1
		if utf8.FullRune(p[r:n]) {
			return n
		}
		return r
	}
	return n
}

func (o *outputBuffer) reset() {
	o.head = o.head[:0]
	o.tail = o.tail[:0]
	o.droppedBytes, o.droppedLines = 0, 0
}
