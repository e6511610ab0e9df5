package pykernel

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Message types sent by driver.py, one JSON object per line. The full list
// with their fields is at the top of driver.py.
const (
	msgReady   = "ready"
	msgOut     = "out"
	msgCut     = "cut"
	msgDisplay = "display"
	msgResult  = "result"
	msgError   = "error"
	msgDone    = "done"
	msgBad     = "bad"
	msgFatal   = "fatal"
	// msgImportErr: a module of Options.Imports failed to import (a driver
	// with imports, or a template, before it is ready).
	msgImportErr = "importerr"
	// Template messages (see template.go): a fork's outcome, a context's exit.
	msgForked = "forked"
	msgExit   = "exit"
)

// wireMessage is the JSON form of a driver message.
type wireMessage struct {
	T          string            `json:"t"`
	N          json.RawMessage   `json:"n,omitempty"` // stream name ("out") or execution count ("done")
	D          string            `json:"d,omitempty"`
	Data       map[string]string `json:"data,omitempty"`
	Bin        []string          `json:"bin,omitempty"`
	Ename      string            `json:"ename,omitempty"`
	Evalue     string            `json:"evalue,omitempty"`
	TB         []string          `json:"tb,omitempty"`
	Status     string            `json:"status,omitempty"`
	DroppedOut int64             `json:"dout,omitempty"`
	DroppedErr int64             `json:"derr,omitempty"`
	DroppedDsp int               `json:"ddisp,omitempty"`
	PID        int               `json:"pid,omitempty"`
	Version    string            `json:"version,omitempty"`
	Executable string            `json:"executable,omitempty"`
	Msg        string            `json:"msg,omitempty"`
	CutBytes   int64             `json:"b,omitempty"`
	CutLines   int64             `json:"l,omitempty"`
	FileBytes  int64             `json:"ofb,omitempty"`
	FileCut    int64             `json:"ofc,omitempty"`
	FileError  string            `json:"ofe,omitempty"`
	Mod        string            `json:"mod,omitempty"`
	Code       *int              `json:"code,omitempty"`
}

// message is a decoded, validated driver message.
type message struct {
	kind   string
	stream string            // out, cut: "stdout" or "stderr"
	text   string            // out: the chunk
	cut    Omission          // cut: what was left out
	data   map[string][]byte // display, result: MIME -> content
	err    *ExecError        // error
	done   doneInfo          // done
	ready  readyInfo         // ready
	note   string            // bad, fatal, forked (why not); importerr: the module; also the text of a line that was not a message
	id     int               // forked: the request's id
	pid    int               // forked, exit: the context's process
	code   int               // exit: its exit code
	size   int               // bytes of the line on the wire
}

type doneInfo struct {
	count      int
	status     string
	droppedOut int64
	droppedErr int64
	droppedDsp int
	fileBytes  int64
	fileCut    int64
	fileError  string
}

type readyInfo struct {
	pid        int
	version    string
	executable string
}

// errNotMessage marks a line that is not a driver message at all (for example
// a Python traceback printed before the driver took over its stdout).
var errNotMessage = errors.New("not a driver message")

// decodeMessage parses one protocol line. It never panics and rejects
// anything that does not have the shape the driver sends; the driver shares
// its process with untrusted code, which can write to the protocol fd.
func decodeMessage(line []byte) (message, error) {
	var w wireMessage
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 || line[0] != '{' {
		return message{}, errNotMessage
	}
	if err := json.Unmarshal(line, &w); err != nil {
		return message{}, fmt.Errorf("%w: %v", errNotMessage, err)
	}
	m := message{kind: w.T, size: len(line)}
	switch w.T {
	case msgReady:
		m.ready = readyInfo{pid: w.PID, version: w.Version, executable: w.Executable}
	case msgOut:
		var stream string
		if err := json.Unmarshal(w.N, &stream); err != nil || (stream != "stdout" && stream != "stderr") {
			return message{}, fmt.Errorf("out message with stream %q", w.N)
		}
		m.stream, m.text = stream, w.D
	case msgCut:
		var stream string
		if err := json.Unmarshal(w.N, &stream); err != nil || (stream != "stdout" && stream != "stderr") {
			return message{}, fmt.Errorf("cut message with stream %q", w.N)
		}
		if w.CutBytes <= 0 || w.CutLines < 0 {
			return message{}, errors.New("cut message without a positive byte count")
		}
		m.stream = stream
		m.cut = Omission{Stream: OutputKind(stream), Bytes: w.CutBytes, Lines: w.CutLines}
	case msgDisplay, msgResult:
		data, err := decodeBundle(w.Data, w.Bin)
		if err != nil {
			return message{}, err
		}
		m.data = data
	case msgError:
		if w.Ename == "" {
			return message{}, errors.New("error message without a name")
		}
		m.err = &ExecError{Name: w.Ename, Value: w.Evalue, Traceback: w.TB}
	case msgDone:
		var count int
		if err := json.Unmarshal(w.N, &count); err != nil {
			return message{}, fmt.Errorf("done message with count %q", w.N)
		}
		switch w.Status {
		case "ok", "error", "interrupted", "exit":
		default:
			return message{}, fmt.Errorf("done message with status %q", w.Status)
		}
		if w.DroppedOut < 0 || w.DroppedErr < 0 || w.DroppedDsp < 0 || w.FileBytes < 0 || w.FileCut < 0 {
			return message{}, errors.New("done message with negative counts")
		}
		m.done = doneInfo{count: count, status: w.Status, droppedOut: w.DroppedOut, droppedErr: w.DroppedErr, droppedDsp: w.DroppedDsp,
			fileBytes: w.FileBytes, fileCut: w.FileCut, fileError: w.FileError}
	case msgBad, msgFatal:
		m.note = w.Msg
	case msgImportErr:
		if w.Mod == "" || w.Ename == "" {
			return message{}, errors.New("importerr message without a module or an exception")
		}
		m.note = w.Mod
		m.err = &ExecError{Name: w.Ename, Value: w.Evalue}
	case msgForked:
		if err := json.Unmarshal(w.N, &m.id); err != nil {
			return message{}, fmt.Errorf("forked message with id %q", w.N)
		}
		if (w.PID <= 0) == (w.Msg == "") {
			return message{}, errors.New("forked message needs a pid or a msg")
		}
		m.pid, m.note = w.PID, w.Msg
	case msgExit:
		if w.PID <= 0 || w.Code == nil {
			return message{}, errors.New("exit message without a pid or a code")
		}
		m.pid, m.code = w.PID, *w.Code
	default:
		return message{}, fmt.Errorf("unknown message type %q", w.T)
	}
	return m, nil
}

// decodeBundle turns the wire form of a MIME bundle into bytes, decoding the
// base64 of the MIME types listed in bin.
func decodeBundle(data map[string]string, bin []string) (map[string][]byte, error) {
	if _, ok := data["text/plain"]; !ok {
		return nil, errors.New("display message without text/plain")
	}
	out := make(map[string][]byte, len(data))
	for mime, v := range data {
		out[mime] = []byte(v)
	}
	for _, mime := range bin {
		v, ok := data[mime]
		if !ok {
			return nil, fmt.Errorf("binary MIME type %q has no data", mime)
		}
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("MIME type %q: bad base64: %v", mime, err)
		}
		out[mime] = raw
	}
	return out, nil
}

// lineReader reads newline-terminated lines of at most max bytes, so a
// driver (or code pretending to be one) can never make the Go side buffer
// without bound. Longer lines are skipped and reported.
type lineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

// errLineTooLong is returned (with the line skipped) for a line over max.
var errLineTooLong = errors.New("protocol line too long")

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its newline. The slice is valid until
// the next call. At the end of input it returns io.EOF (a final line without
// newline is returned first).
func (lr *lineReader) next() ([]byte, error) {
	if cap(lr.buf) > 4<<20 {
		lr.buf = nil // do not keep a huge buffer alive between big outputs
	}
	lr.buf = lr.buf[:0]
	tooLong := false
	for {
		chunk, err := lr.br.ReadSlice('\n')
		content := bytes.TrimSuffix(chunk, []byte{'\n'})
		if !tooLong {
			if len(lr.buf)+len(content) > lr.max {
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, content...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil && !tooLong && len(lr.buf) == 0:
			return nil, err
		case tooLong:
			return nil, errLineTooLong
		}
		return lr.buf, nil
	}
}
