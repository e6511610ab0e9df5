package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxLineBytes bounds one inbound message of a [LineTransport] when
// MaxLineBytes is zero: 16 MiB, the go-sdk's own default, far above any
// tool call a model makes (write_file content is the largest).
const DefaultMaxLineBytes = 16 << 20

// LineTransport carries MCP over newline-delimited JSON-RPC on a reader and a
// writer: the stdio transport of `sandboxkit mcp`. Use it instead of the
// go-sdk's StdioTransport or IOTransport.
//
// Why not the SDK's: in go-sdk v1.8.0 one malformed line (garbage, a
// truncated object, invalid UTF-8, a batch array, "jsonrpc":"1.0", an id
// that is an object) makes the SDK's connection return a read error, which
// ends the session: `sandboxkit mcp` exited with status 1 and the session's
// sandbox, with every file and process in it, was gone, while the client got
// no answer at all. JSON-RPC 2.0 says such a line gets an error response
// (-32700 parse error, -32600 invalid request) and the server carries on.
// This transport checks every line before the SDK sees it: a line the SDK
// would refuse is answered here, logged, and skipped; only well-formed
// messages reach the session. It also keeps two promises the SDK's replies
// break: a request the client cancelled (notifications/cancelled) gets no
// reply, and no error reply carries code 0 (the SDK sends code 0 for a Go
// error that has no JSON-RPC code; it becomes -32603, internal error).
type LineTransport struct {
	// In is read line by line. It is closed when the connection closes,
	// if it is an io.Closer. When In has a working SetReadDeadline (a
	// net.Conn, a pipe from os.Pipe), the session's reads read it
	// directly; otherwise a goroutine reads it and hands each message
	// over, so that closing the connection never waits for a read that
	// a close does not interrupt (os.Stdin in blocking mode: its read
	// returns with the next line).
	In io.Reader
	// Out receives one JSON-RPC message per line. It is closed when the
	// connection closes, if it is an io.Closer.
	Out io.Writer
	// Logger receives a line per refused message (nil discards them).
	// Never log to Out: it is the protocol stream.
	Logger *slog.Logger
	// MaxLineBytes bounds one inbound message; a longer line is skipped
	// and answered with -32600. Zero means DefaultMaxLineBytes.
	MaxLineBytes int

	stdin bool // In is os.Stdin: read a pollable reopening of it if there is one
}

// StdioTransport returns a LineTransport on the process's standard input and
// output (standard output is left open when the connection closes), logging
// refused lines to log (which must not write to stdout). When standard input is a pipe, the
// connection reads it through a descriptor of its own that Go's poller
// waits on (Linux; see LineTransport.In).
func StdioTransport(log *slog.Logger) *LineTransport {
	return &LineTransport{In: os.Stdin, Out: struct{ io.Writer }{os.Stdout}, Logger: log, stdin: true}
}

// Connect implements the go-sdk's Transport interface. It starts reading In.
func (t *LineTransport) Connect(context.Context) (sdk.Connection, error) {
	if t.In == nil || t.Out == nil {
		return nil, errors.New("mcp.LineTransport: In and Out must be set")
	}
	in := t.In
	if t.stdin {
		if f := pollableStdin(); f != nil {
			in = f // ours to close; os.Stdin stays open
		}
	}
	c := &lineConn{
		in:       in,
		out:      t.Out,
		log:      t.Logger,
		max:      t.MaxLineBytes,
		incoming: make(chan jsonrpc.Message),
		closed:   make(chan struct{}),
		inflight: map[jsonrpc.ID]bool{},
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.max <= 0 {
		c.max = DefaultMaxLineBytes
	}
	c.r = bufio.NewReaderSize(c.in, 64<<10)
	if d, ok := in.(readDeadliner); ok && d.SetReadDeadline(noDeadline) == nil {
		// In can be interrupted (a pipe or socket Go's poller waits on):
		// Read reads it itself, so that a message reaches the session
		// without a hand-off between goroutines.
		c.direct = d
		return c, nil
	}
	go c.readLoop()
	return c, nil
}

// readDeadliner is an In whose blocked reads a deadline (and so Close)
// interrupts: net.Conn, and an *os.File that Go's poller waits on (a pipe
// made by os.Pipe, standard input made pollable by StdioTransport); the
// SetReadDeadline of other files fails with os.ErrNoDeadline.
type readDeadliner interface {
	SetReadDeadline(time.Time) error
}

// noDeadline clears a read deadline.
var noDeadline time.Time

// lineConn is one LineTransport connection.
type lineConn struct {
	in  io.Reader
	out io.Writer
	log *slog.Logger
	max int

	r *bufio.Reader // In, read only by the reader (readLoop or Read)

	// Either Read reads In itself (direct is set: In can be interrupted)
	// or a goroutine, readLoop, does and hands messages over on incoming,
	// so that Close can end a Read blocked on an In that a close does
	// not interrupt (os.Stdin in blocking mode: its read returns with the
	// next line or EOF, whenever that comes).
	//
	// Reading in Read saves a goroutine hand-off (a park and a wake-up)
	// per inbound message. Under load the difference is within the noise
	// (BenchmarkCall mcp=lines, A/B alternated at real-time priority,
	// load 15: 53-57 µs against 55-66 µs); the hand-offs are what an idle
	// machine pays most for, each one possibly waking a sleeping thread.
	direct   readDeadliner
	watched  context.Context // the context a direct Read's deadline follows
	unwatch  func() bool
	incoming chan jsonrpc.Message // readLoop: well-formed messages, in order
	closed   chan struct{}
	once     sync.Once
	readErr  error // why In ended; readLoop sets it before closing incoming

	writeMu sync.Mutex // one line at a time on out

	// inflight holds the ids of the client's requests that have not been
	// answered yet; a true value means the client cancelled it, so its
	// reply is dropped. Only ids of requests seen are kept, so the map is
	// bounded by what is in flight.
	mu       sync.Mutex
	inflight map[jsonrpc.ID]bool
}

func (c *lineConn) SessionID() string { return "" }

// readLoop reads messages until In ends and hands them to Read.
func (c *lineConn) readLoop() {
	for {
		msg, err := c.next()
		if msg != nil {
			select {
			case c.incoming <- msg:
			case <-c.closed:
				return
			}
		}
		if err != nil {
			c.mu.Lock()
			c.readErr = err
			c.mu.Unlock()
			close(c.incoming)
			return
		}
	}
}

// next reads lines until one carries a message for the session, answering
// and skipping the malformed ones. err is why In ended; the last line may
// still have carried a message.
func (c *lineConn) next() (jsonrpc.Message, error) {
	for {
		line, tooLong, err := readLine(c.r, c.max)
		var msg jsonrpc.Message
		if tooLong {
			c.refuse(nullID, jsonrpc.CodeInvalidRequest, fmt.Sprintf("message longer than %d bytes; it was skipped", c.max), line)
		} else if len(bytes.TrimSpace(line)) > 0 {
			msg = c.check(line)
		}
		if msg != nil || err != nil {
			return msg, err
		}
	}
}

// readLine returns the next line without its newline. A line over max bytes
// is consumed to its end and reported as tooLong with its first bytes (for
// the log), so that one huge line costs at most max bytes of memory.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong = true
				line = append(line, chunk[:min(len(chunk), 200)]...)
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		return line, tooLong, err
	}
}

// check returns the message a line carries, or nil when the line was
// malformed (and answered, where JSON-RPC says to answer).
func (c *lineConn) check(line []byte) jsonrpc.Message {
	// JSON text is UTF-8 (RFC 8259 §8.1). Go's decoder would quietly turn
	// bad bytes into U+FFFD; a message that is not what was sent is refused.
	if !utf8.Valid(line) {
		c.refuse(nullID, jsonrpc.CodeParseError, "parse error: the message is not valid UTF-8", line)
		return nil
	}
	// One decode both validates the line (Unmarshal checks the whole
	// text before it decodes: a syntax error means the line is not JSON)
	// and splits it into fields.
	trimmed := bytes.TrimSpace(line)
	var fields map[string]json.RawMessage
	err := json.Unmarshal(trimmed, &fields)
	if _, bad := err.(*json.SyntaxError); bad {
		c.refuse(nullID, jsonrpc.CodeParseError, "parse error: the message is not valid JSON", line)
		return nil
	}
	if trimmed[0] == '[' {
		// MCP 2025-06-18 removed JSON-RPC batching; one message per line.
		c.refuse(nullID, jsonrpc.CodeInvalidRequest, "invalid request: batches (JSON arrays) are not supported; send one message per line", line)
		return nil
	}
	if trimmed[0] != '{' || err != nil {
		c.refuse(nullID, jsonrpc.CodeInvalidRequest, "invalid request: a message must be a JSON object", line)
		return nil
	}
	id, idOK := parseID(fields["id"])
	_, hasID := fields["id"]
	if !idOK {
		c.refuse(nullID, jsonrpc.CodeInvalidRequest, "invalid request: id must be a string or an integer", line)
		return nil
	}
	var version string
	if json.Unmarshal(fields["jsonrpc"], &version) != nil || version != "2.0" {
		c.refuse(answerable(fields, id), jsonrpc.CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`, line)
		return nil
	}
	if tooDeep(trimmed) {
		// The SDK refuses such a message (its decoder's depth limit) only
		// later, and differently depending on where the nesting is; refuse
		// it here, where it can be answered as what it is.
		c.refuse(answerable(fields, id), jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: JSON nested deeper than %d levels", maxDepth), line)
		return nil
	}
	rawMethod, isRequest := fields["method"]
	var msg jsonrpc.Message
	if isRequest {
		var method string
		if json.Unmarshal(rawMethod, &method) != nil {
			c.refuse(answerable(fields, id), jsonrpc.CodeInvalidRequest, "invalid request: method must be a string", line)
			return nil
		}
		p, ok := fields["params"]
		if ok && !isStructured(p) {
			c.refuse(answerable(fields, id), jsonrpc.CodeInvalidRequest, "invalid request: params must be an object or an array", line)
			return nil
		}
		// The request is built from the fields decoded above rather than
		// by jsonrpc.DecodeMessage, which decodes the line again: in
		// go-sdk v1.8.0 each of its decodes allocates a 32 KiB buffer
		// (two per message, one of them for the method name), and that
		// garbage was half of what the server allocated per tool call
		// (BenchmarkCall, mcp=lines).
		req := &jsonrpc.Request{Method: method, Params: p}
		if id != nil {
			req.ID = *id
		}
		msg = req
	} else {
		// A response to one of the server's requests. There is nothing to
		// answer a malformed one with: log it and go on.
		_, hasResult := fields["result"]
		_, hasError := fields["error"]
		if !hasID || id == nil || hasResult == hasError {
			c.refuse(nil, jsonrpc.CodeInvalidRequest, "not answered: a message with neither a method nor exactly one of result and error", line)
			return nil
		}
		// Responses (to the server's own requests: elicitation,
		// sampling) are rare; the SDK decodes their error object.
		msg, err = jsonrpc.DecodeMessage(trimmed)
		if err != nil {
			c.refuse(nil, jsonrpc.CodeInvalidRequest, "not answered: "+err.Error(), line)
			return nil
		}
	}
	if req, ok := msg.(*jsonrpc.Request); ok && !c.track(req) {
		// A cancellation of a request that is not in flight (answered
		// already, or never sent) is ignored, as MCP says: passed on, the
		// SDK would apply it later, to whatever request then has that id.
		c.log.Debug("ignored a cancellation of a request not in flight", "line", logSnippet(line))
		return nil
	}
	return msg
}

// nullID answers a message whose id is unknown: JSON-RPC's reply to a parse
// error or an invalid request has id null.
var nullID = &jsonrpc.ID{}

// answerable returns the id to answer a refused message with: its own id
// when it has a valid one, id null when it has none (JSON-RPC answers an
// invalid request with id null: it cannot know the sender meant a
// notification), or nil, no answer, for a malformed response.
func answerable(fields map[string]json.RawMessage, id *jsonrpc.ID) *jsonrpc.ID {
	if _, isRequest := fields["method"]; !isRequest {
		if _, isResponse := fields["result"]; isResponse {
			return nil
		}
		if _, isResponse := fields["error"]; isResponse {
			return nil
		}
	}
	if id == nil {
		return nullID
	}
	return id
}

// parseID reads a JSON-RPC id: absent or null (nil, ok), a string, or an
// integer. A fractional number would be truncated by the SDK and its reply
// would name another request, so it is refused like an object or a bool.
func parseID(raw json.RawMessage) (*jsonrpc.ID, bool) {
	if raw == nil || string(bytes.TrimSpace(raw)) == "null" {
		return nil, true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		id, _ := jsonrpc.MakeID(s)
		return &id, true
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || n == math.MinInt64 {
		return nil, false
	}
	// MakeID takes the float64 of encoding/json; ids beyond 2^53 lose
	// precision there too, as they would in the SDK.
	id, _ := jsonrpc.MakeID(float64(n))
	return &id, true
}

// maxDepth is the deepest nesting of objects and arrays a message may have:
// the go-sdk's decoder refuses deeper ones (its own limit, 1000), so a
// message past it could never be served.
const maxDepth = 1000

// tooDeep reports whether valid JSON nests objects and arrays deeper than
// maxDepth. One pass, skipping strings.
func tooDeep(data []byte) bool {
	depth := 0
	inString, escaped := false, false
	for _, b := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch b {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > maxDepth {
				return true
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return false
}

func isStructured(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// refuse logs a malformed line and, when id is not nil, answers it with an
// error response (id null when id is nullID).
func (c *lineConn) refuse(id *jsonrpc.ID, code int64, message string, line []byte) {
	c.log.Warn("refused a malformed MCP message; the session goes on", "code", code, "reason", message,
		"bytes", len(line), "line", logSnippet(line))
	if id == nil {
		return
	}
	var idJSON json.RawMessage = []byte("null")
	if id.IsValid() {
		idJSON, _ = json.Marshal(id.Raw())
	}
	reply, _ := json.Marshal(struct {
		Version string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", idJSON, jsonrpc.Error{Code: code, Message: message}})
	if err := c.writeLine(reply); err != nil {
		c.log.Warn("could not answer a malformed message", "error", err)
	}
}

// logSnippet bounds what a log line quotes of a hostile line.
func logSnippet(line []byte) string {
	const n = 120
	if len(line) > n {
		return strconv.Quote(string(line[:n])) + "…"
	}
	return strconv.Quote(string(line))
}

// track records the client's calls in flight and its cancellations of them.
// It returns false for a cancellation of a request that is not in flight.
func (c *lineConn) track(req *jsonrpc.Request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.IsCall() {
		c.inflight[req.ID] = false
		return true
	}
	if req.Method != "notifications/cancelled" {
		return true
	}
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return true // malformed params: the SDK answers nothing to a notification either way
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return true
	}
	if _, ok := c.inflight[id]; !ok {
		return false
	}
	c.inflight[id] = true
	return true
}

// Read returns the next well-formed message.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if c.direct != nil {
		return c.readDirect(ctx)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case msg, ok := <-c.incoming:
		if !ok {
			c.mu.Lock()
			err := c.readErr
			c.mu.Unlock()
			return nil, err
		}
		return msg, nil
	}
}

// readDirect is Read when In can be interrupted: it reads In itself. ctx
// ending sets a read deadline in the past, Close closes In; either ends a
// blocked read. What ended In is returned by this and every later Read.
func (c *lineConn) readDirect(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-c.closed:
		return nil, io.EOF
	default:
	}
	if c.readErr != nil {
		return nil, c.readErr
	}
	if err := c.watch(ctx); err != nil {
		return nil, err
	}
	msg, err := c.next()
	if err != nil {
		select {
		case <-c.closed:
			err = io.EOF
		default:
			if ctx.Err() != nil {
				err = ctx.Err()
			}
		}
		c.readErr = err
	}
	if msg != nil {
		return msg, nil
	}
	return nil, c.readErr
}

// watch makes ctx's end interrupt direct reads of In. The session passes
// the same context to every Read, so this registers once.
func (c *lineConn) watch(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx == c.watched || ctx.Done() == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unwatch != nil {
		c.unwatch()
	}
	c.watched = ctx
	d := c.direct
	c.unwatch = context.AfterFunc(ctx, func() { _ = d.SetReadDeadline(time.Unix(1, 0)) })
	return nil
}

// Write sends msg on one line. A reply to a request the client cancelled is
// dropped (MCP: the receiver of a cancellation "SHOULD NOT send a response
// for the cancelled request"), and an error without a JSON-RPC code gets
// -32603 instead of 0.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		cancelled, tracked := c.inflight[resp.ID]
		delete(c.inflight, resp.ID)
		c.mu.Unlock()
		if tracked && cancelled {
			c.log.Info("dropped the reply to a request the client cancelled", "id", resp.ID.Raw())
			return nil
		}
		if resp.Error != nil {
			var we *jsonrpc.Error
			if !errors.As(resp.Error, &we) || we.Code == 0 {
				r := *resp
				r.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: resp.Error.Error()}
				msg = &r
			}
		}
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(data)
}

func (c *lineConn) writeLine(data []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	select {
	case <-c.closed:
		return sdk.ErrConnectionClosed
	default:
	}
	_, err := c.out.Write(append(data, '\n'))
	return err
}

// Close ends the connection and closes In (so that the read loop ends where
// the reader allows it).
func (c *lineConn) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closed)
		c.mu.Lock()
		if c.unwatch != nil {
			c.unwatch()
		}
		c.mu.Unlock()
		if cl, ok := c.in.(io.Closer); ok {
			err = cl.Close()
		}
		if cl, ok := c.out.(io.Closer); ok {
			err = errors.Join(err, cl.Close())
		}
	})
	return err
}
