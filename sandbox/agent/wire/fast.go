package wire

import "strconv"

// The JSON of the messages a small read is made of — the request's
// envelope, fs.read's arguments and its reply — has a fast path beside
// encoding/json: each side writes and reads the exact shape these write,
// and anything else goes through encoding/json as before.
//
// Why: encoding/json works by reflection over a large body of code and
// tables, and a call that comes after a pause — as every call of a model
// does — finds all of it cold (caches and TLBs of a vCPU that halted).
// Measured on the 2-core VM after 50 ms idle: decoding a request and its
// fs.read arguments took 16-30 µs cold against 1.5 µs hot, encoding and
// decoding the reply 20-29 µs against 0.9; in the agent's CPU profile of
// such calls encoding/json.Unmarshal alone was 16% (~22 µs a call). The
// fast paths touch a few hundred bytes of code.

// FastAppender is a message with a fast encoder: AppendJSONFast appends
// exactly what json.Marshal would write, or reports false (the caller then
// uses json.Marshal).
type FastAppender interface {
	AppendJSONFast(buf []byte) ([]byte, bool)
}

// FastUnmarshaler is a message with a fast decoder of the shape its
// AppendJSONFast writes: UnmarshalFast sets the message as json.Unmarshal
// into a zero value would, or reports false, having changed nothing, for
// any other input (the caller then uses json.Unmarshal).
type FastUnmarshaler interface {
	UnmarshalFast(b []byte) bool
}

// simpleString reports whether s is written by encoding/json as itself in
// quotes: printable ASCII other than the characters it escapes (" \ and,
// HTML-escaped, < > &).
func simpleString(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendSimpleString appends s in quotes if simpleString allows.
func appendSimpleString(buf []byte, s string) ([]byte, bool) {
	if !simpleString([]byte(s)) {
		return buf, false
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"'), true
}

// AppendRequestOp appends `{"op":"NAME"` for an operation name that needs
// no escaping (false otherwise).
func AppendRequestOp(buf []byte, op string) ([]byte, bool) {
	return appendSimpleString(append(buf, `{"op":`...), op)
}

// ParseRequestFast decodes a request written as `{"op":"NAME"}` or
// `{"op":"NAME","args":VALUE}` — what the client writes — with NAME
// needing no unescaping and VALUE a single JSON value ending the object;
// false for anything else. VALUE is not validated here: the operation's
// decoder of its arguments does that (a malformed one is then refused as
// bad arguments rather than as a malformed request).
func ParseRequestFast(p []byte) (Request, bool) {
	const pre = `{"op":"`
	if len(p) < len(pre)+2 || string(p[:len(pre)]) != pre || p[len(p)-1] != '}' {
		return Request{}, false
	}
	rest := p[len(pre):]
	i := 0
	for i < len(rest) && rest[i] != '"' {
		i++
	}
	if i == 0 || i == len(rest) || !simpleString(rest[:i]) {
		return Request{}, false
	}
	req := Request{Op: string(rest[:i])}
	rest = rest[i+1:]
	if len(rest) == 1 { // "}"
		return req, true
	}
	const args = `,"args":`
	if len(rest) < len(args)+2 || string(rest[:len(args)]) != args {
		return Request{}, false
	}
	v := rest[len(args) : len(rest)-1]
	if valueEnd(v) != len(v) {
		return Request{}, false
	}
	req.Args = v
	return req, true
}

// valueEnd returns where the JSON value at the start of v ends, by its
// brackets and strings only (-1 if it does not end in v).
func valueEnd(v []byte) int {
	if len(v) == 0 {
		return -1
	}
	switch v[0] {
	case '{', '[', '"':
	default: // a number or a literal: up to the next delimiter
		for i, c := range v {
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '"' || c == '{' || c == '[' {
				return i
			}
		}
		return len(v)
	}
	depth, inString := 0, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
				if depth == 0 {
					return i + 1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return -1
			}
		}
	}
	return -1
}

// parser reads the fixed shapes the fast encoders write.
type parser struct {
	b  []byte
	ok bool
}

func (p *parser) lit(s string) {
	if p.ok && len(p.b) >= len(s) && string(p.b[:len(s)]) == s {
		p.b = p.b[len(s):]
		return
	}
	p.ok = false
}

// field consumes `,"name":` if it comes next.
func (p *parser) field(name string) bool {
	n := len(name) + 4
	if !p.ok || len(p.b) < n || p.b[0] != ',' || p.b[1] != '"' || string(p.b[2:2+len(name)]) != name || p.b[2+len(name)] != '"' || p.b[3+len(name)] != ':' {
		return false
	}
	p.b = p.b[n:]
	return true
}

// int reads an integer written as encoding/json writes one (bits: the
// destination's size; anything else, or out of range, fails).
func (p *parser) int(bits int) int64 {
	if !p.ok {
		return 0
	}
	i := 0
	if i < len(p.b) && p.b[i] == '-' {
		i++
	}
	j := i
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == i || (p.b[i] == '0' && j > i+1) || j-i > 19 {
		p.ok = false
		return 0
	}
	n, err := strconv.ParseInt(string(p.b[:j]), 10, bits)
	if err != nil {
		p.ok = false
		return 0
	}
	p.b = p.b[j:]
	return n
}

// str reads a string that needs no unescaping.
func (p *parser) str() string {
	if !p.ok || len(p.b) == 0 || p.b[0] != '"' {
		p.ok = false
		return ""
	}
	i := 1
	for i < len(p.b) && p.b[i] != '"' {
		i++
	}
	if i == len(p.b) || !simpleString(p.b[1:i]) {
		p.ok = false
		return ""
	}
	s := string(p.b[1:i])
	p.b = p.b[i+1:]
	return s
}

// boolTrue reads `true` (omitempty writes a bool only when true).
func (p *parser) boolTrue() bool {
	p.lit("true")
	return p.ok
}

func (p *parser) end() bool {
	p.lit("}")
	return p.ok && len(p.b) == 0
}

func appendIntField(buf []byte, name string, n int64) []byte {
	buf = append(append(append(buf, ",\""...), name...), "\":"...)
	return strconv.AppendInt(buf, n, 10)
}

// AppendJSONFast implements FastAppender.
func (r FSReadRequest) AppendJSONFast(buf []byte) ([]byte, bool) {
	buf, ok := appendSimpleString(append(buf, `{"path":`...), r.Path)
	if !ok {
		return buf, false
	}
	if r.Offset != 0 {
		buf = appendIntField(buf, "offset", int64(r.Offset))
	}
	if r.Limit != 0 {
		buf = appendIntField(buf, "limit", int64(r.Limit))
	}
	if r.MaxBytes != 0 {
		buf = appendIntField(buf, "max_bytes", r.MaxBytes)
	}
	return append(buf, '}'), true
}

// UnmarshalFast implements FastUnmarshaler.
func (r *FSReadRequest) UnmarshalFast(b []byte) bool {
	p := parser{b: b, ok: true}
	var v FSReadRequest
	p.lit(`{"path":`)
	v.Path = p.str()
	if p.field("offset") {
		v.Offset = int(p.int(strconv.IntSize))
	}
	if p.field("limit") {
		v.Limit = int(p.int(strconv.IntSize))
	}
	if p.field("max_bytes") {
		v.MaxBytes = p.int(64)
	}
	if !p.end() {
		return false
	}
	*r = v
	return true
}

// AppendJSONFast implements FastAppender for a reply whose data travels
// in a Blob frame (Data nil; false otherwise).
func (r FSReadReply) AppendJSONFast(buf []byte) ([]byte, bool) {
	if r.Data != nil {
		return buf, false
	}
	buf = strconv.AppendInt(append(buf, `{"data":null,"size":`...), r.Size, 10)
	if r.Binary {
		buf = append(buf, `,"binary":true`...)
	}
	if r.InBlob {
		buf = append(buf, `,"in_blob":true`...)
	}
	if r.Lines != 0 {
		buf = appendIntField(buf, "lines", int64(r.Lines))
	}
	if r.More {
		buf = append(buf, `,"more":true`...)
	}
	if r.Truncated {
		buf = append(buf, `,"truncated":true`...)
	}
	return append(buf, '}'), true
}

// UnmarshalFast implements FastUnmarshaler.
func (r *FSReadReply) UnmarshalFast(b []byte) bool {
	p := parser{b: b, ok: true}
	var v FSReadReply
	p.lit(`{"data":null,"size":`)
	v.Size = p.int(64)
	if p.field("binary") {
		v.Binary = p.boolTrue()
	}
	if p.field("in_blob") {
		v.InBlob = p.boolTrue()
	}
	if p.field("lines") {
		v.Lines = int(p.int(strconv.IntSize))
	}
	if p.field("more") {
		v.More = p.boolTrue()
	}
	if p.field("truncated") {
		v.Truncated = p.boolTrue()
	}
	if !p.end() {
		return false
	}
	*r = v
	return true
}
