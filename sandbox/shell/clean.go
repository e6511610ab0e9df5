package shell

import "unicode/utf8"

// Cleaner turns raw terminal output into plain text, incrementally: ANSI escape
// sequences (CSI, OSC, DCS, SOS, PM, APC and two-byte escapes) are removed,
// "\r\n" becomes "\n", a lone "\r" becomes "\n" (so progress bars stay readable
// instead of being lost), other control characters except "\n" and "\t" are
// dropped, and invalid UTF-8 becomes U+FFFD.
//
// Output is the same however the input is split across Append calls: state
// (an unfinished escape sequence, the bytes of a UTF-8 character cut by a read,
// a pending "\r") is carried to the next call. The zero value is ready to use.
type Cleaner struct {
	state   cleanState
	seqLen  int     // bytes consumed by the current escape sequence, to bound it
	pend    [4]byte // start of a UTF-8 character whose remaining bytes have not arrived
	npend   int
	cr      bool // a "\r" was seen and not yet resolved
	scratch []byte
}

type cleanState uint8

const (
	stNormal    cleanState = iota
	stEsc                  // after ESC
	stEscInter             // ESC followed by intermediate bytes, waiting for the final byte
	stCSI                  // ESC [ parameters
	stString               // OSC/DCS/SOS/PM/APC body, ends with BEL or ESC \
	stStringEsc            // ESC seen inside a string body
)

// Escape sequences longer than these are treated as garbage and abandoned, so a
// stray ESC cannot swallow the rest of a command's output.
const (
	maxCSILen    = 256
	maxStringLen = 8192
)

// Append cleans p and appends the text to dst. Bytes that may belong to a
// character or sequence continued by the next call are held back.
func (c *Cleaner) Append(dst, p []byte) []byte {
	if c.npend > 0 {
		// Rejoin the cut character with its continuation; at most 3 bytes are copied.
		c.scratch = append(append(c.scratch[:0], c.pend[:c.npend]...), p...)
		p = c.scratch
		c.npend = 0
	}
	for i := 0; i < len(p); {
		b := p[i]
		if c.state != stNormal {
			if c.escape(b) {
				i++
			}
			continue
		}
		if b < utf8.RuneSelf {
			dst = c.ascii(dst, b)
			i++
			continue
		}
		if !utf8.FullRune(p[i:]) {
			c.npend = copy(c.pend[:], p[i:])
			break
		}
		r, size := utf8.DecodeRune(p[i:])
		i += size
		if r >= 0x80 && r <= 0x9f {
			continue // C1 control characters have no place in text
		}
		dst = c.resolveCR(dst)
		dst = utf8.AppendRune(dst, r) // RuneError for invalid bytes is U+FFFD
	}
	return dst
}

// Flush ends the stream: a character left incomplete becomes U+FFFD, a trailing
// lone "\r" is dropped and any unfinished escape sequence is discarded.
func (c *Cleaner) Flush(dst []byte) []byte {
	if c.npend > 0 {
		for i := 0; i < c.npend; {
			_, size := utf8.DecodeRune(c.pend[i:c.npend])
			i += size
			dst = c.resolveCR(dst)
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
		c.npend = 0
	}
	c.cr = false
	c.state = stNormal
	c.seqLen = 0
	return dst
}

// Clean is the one-shot form of Cleaner: it cleans a complete output.
func Clean(p []byte) string {
	var c Cleaner
	out := c.Append(make([]byte, 0, len(p)), p)
	return string(c.Flush(out))
}

func (c *Cleaner) resolveCR(dst []byte) []byte {
	if c.cr {
		c.cr = false
		dst = append(dst, '\n')
	}
	return dst
}

func (c *Cleaner) ascii(dst []byte, b byte) []byte {
	switch {
	case b == 0x1b:
		c.state, c.seqLen = stEsc, 0
	case b == '\r':
		c.cr = true
	case b == '\n':
		c.cr = false
		dst = append(dst, '\n')
	case b == '\t' || (b >= 0x20 && b < 0x7f):
		dst = c.resolveCR(dst)
		dst = append(dst, b)
	}
	// Other C0 controls and DEL are dropped.
	return dst
}

// escape advances the escape-sequence state machine by one byte. It reports
// whether b was consumed; if not, the sequence was abandoned and b must be
// processed again as ordinary text.
func (c *Cleaner) escape(b byte) bool {
	c.seqLen++
	switch c.state {
	case stEsc:
		switch {
		case b == '[':
			c.state = stCSI
		case b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_':
			c.state = stString
		case b >= 0x20 && b <= 0x2f:
			c.state = stEscInter
		case b == 0x1b:
			// ESC ESC: the first one was alone.
		case b >= 0x30 && b <= 0x7e:
			c.state = stNormal
		default:
			c.state = stNormal
			return false
		}
	case stEscInter:
		switch {
		case b >= 0x20 && b <= 0x2f && c.seqLen < maxCSILen:
		case b >= 0x30 && b <= 0x7e:
			c.state = stNormal
		default:
			c.state = stNormal
			return false
		}
	case stCSI:
		switch {
		case b >= 0x20 && b <= 0x3f && c.seqLen < maxCSILen:
		case b >= 0x40 && b <= 0x7e:
			c.state = stNormal
		default:
			c.state = stNormal
			return false
		}
	case stString:
		switch {
		case b == 0x07:
			c.state = stNormal
		case b == 0x1b:
			c.state = stStringEsc
		case c.seqLen >= maxStringLen:
			c.state = stNormal
			return false
		}
	case stStringEsc:
		if b == '\\' {
			c.state = stNormal
			return true
		}
		// ESC not followed by "\" ends the string and starts a new sequence.
		c.state, c.seqLen = stEsc, 0
		return false
	}
	return true
}
