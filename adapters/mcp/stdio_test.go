package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// hostileLines are the lines that ended a go-sdk stdio session (issue 18),
// each with the error code JSON-RPC 2.0 says the server answers with (0: no
// answer, e.g. a notification or a malformed response).
var hostileLines = []struct {
	name string
	line string
	code int64
}{
	{"garbage", "this is not json", jsonrpc.CodeParseError},
	{"truncated JSON", `{"jsonrpc":"2.0","id":"raw-1","method":"tools/li`, jsonrpc.CodeParseError},
	{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":\"raw-2\",\"method\":\"ping\",\"params\":{\"x\":\"\xff\xfe\"}}", jsonrpc.CodeParseError},
	{"batch array", `[{"jsonrpc":"2.0","id":"raw-3","method":"ping"}]`, jsonrpc.CodeInvalidRequest},
	{"empty batch", `[]`, jsonrpc.CodeInvalidRequest},
	{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":"raw-4","method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"no version", `{"id":"raw-5","method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, jsonrpc.CodeInvalidRequest},
	{"number method", `{"jsonrpc":"2.0","id":"raw-6","method":7}`, jsonrpc.CodeInvalidRequest},
	{"string params", `{"jsonrpc":"2.0","id":"raw-7","method":"tools/list","params":"x"}`, jsonrpc.CodeInvalidRequest},
	{"scalar", `42`, jsonrpc.CodeInvalidRequest},
	{"null", `null`, jsonrpc.CodeInvalidRequest},
	{"deep nesting", `{"jsonrpc":"2.0","id":"raw-8","method":"ping","params":{"a":` + strings.Repeat("[", 1500) + strings.Repeat("]", 1500) + `}}`, jsonrpc.CodeInvalidRequest},
	{"response without id", `{"jsonrpc":"2.0","result":{}}`, 0},
	{"bad notification", `{"jsonrpc":"1.0","method":"notifications/initialized"}`, jsonrpc.CodeInvalidRequest},
	{"unknown method", `{"jsonrpc":"2.0","id":"raw-9","method":"no/such/method"}`, jsonrpc.CodeMethodNotFound},
	{"control bytes", "\x00\x01\x02", jsonrpc.CodeParseError},
}

// tap is the client's end of a line stream to a server: the go-sdk client
// speaks through it, and the test writes raw lines into the same stream and
// collects the server's replies to them (those with id null or a string id
// "raw-…"; the SDK client's own ids are integers).
type tap struct {
	w       io.WriteCloser
	r       *bufio.Reader
	rc      io.Closer
	mu      sync.Mutex // one line at a time on w
	replies chan map[string]any
	closed  chan struct{}
	once    sync.Once
}

func (t *tap) Connect(context.Context) (sdk.Connection, error) { return t, nil }
func (t *tap) SessionID() string                               { return "" }

func (t *tap) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		line, err := t.r.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, err
		}
		if id, ok := m["id"]; ok && (id == nil || strings.HasPrefix(stringOr(id), "raw-")) {
			select {
			case t.replies <- m:
			case <-t.closed:
				return nil, io.EOF
			}
			continue
		}
		return jsonrpc.DecodeMessage(line)
	}
}

func stringOr(v any) string {
	s, _ := v.(string)
	return s
}

func (t *tap) Write(_ context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return t.inject(string(data))
}

func (t *tap) inject(line string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := io.WriteString(t.w, line+"\n")
	return err
}

func (t *tap) Close() error {
	t.once.Do(func() { close(t.closed); t.w.Close(); t.rc.Close() })
	return nil
}

// lockedBuffer is a log destination the test can read while the server
// writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// input is how a test gives a LineTransport its input: a reader whose
// blocked reads a deadline interrupts (the transport reads it in Read), or
// one it must read from a goroutine of its own.
type input struct {
	name string
	pipe func(testing.TB) (io.ReadCloser, io.WriteCloser)
}

var inputs = []input{
	{"os.Pipe read in Read", func(t testing.TB) (io.ReadCloser, io.WriteCloser) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		return r, w
	}},
	{"io.Pipe read by a goroutine", func(testing.TB) (io.ReadCloser, io.WriteCloser) { return io.Pipe() }},
}

// forEachInput runs test once per kind of input.
func forEachInput(t *testing.T, test func(t *testing.T, in input)) {
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) { test(t, in) })
	}
}

// lineSession runs srv over a LineTransport on pipes and connects the SDK
// client to it through a tap.
func lineSession(t testing.TB, srv *Server, log *slog.Logger, in input) (*sdk.ClientSession, *tap, <-chan error) {
	t.Helper()
	return lineSessionMax(t, srv, log, 0, in)
}

// lineSessionMax is lineSession with the transport's MaxLineBytes.
func lineSessionMax(t testing.TB, srv *Server, log *slog.Logger, maxLine int, in input) (*sdk.ClientSession, *tap, <-chan error) {
	t.Helper()
	inR, inW := in.pipe(t)
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, &LineTransport{In: inR, Out: outW, Logger: log, MaxLineBytes: maxLine}) }()
	tp := &tap{w: inW, r: bufio.NewReader(outR), rc: outR, replies: make(chan map[string]any, 64), closed: make(chan struct{})}
	cctx, ccancel := context.WithTimeout(context.Background(), bound)
	defer ccancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(cctx, tp, nil)
	if err != nil {
		cancel()
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		cancel()
		<-ran
	})
	return cs, tp, ran
}

func (t *tap) reply(tb testing.TB, what string) map[string]any {
	tb.Helper()
	select {
	case m := <-t.replies:
		return m
	case <-time.After(bound):
		tb.Fatalf("no reply to %s", what)
		return nil
	}
}

func errorCode(m map[string]any) int64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return int64(c)
}

func TestLineTransportSurvivesMalformedLines(t *testing.T) {
	forEachInput(t, func(t *testing.T, in input) {
		f := &factory{}
		srv := NewServer(f.make, nil)
		defer srv.Close()
		var logged lockedBuffer
		cs, tp, ran := lineSession(t, srv, slog.New(slog.NewTextHandler(&logged, nil)), in)
		want := 1
		if got := textOf(call(t, cs, "count", nil)); got != "kit 1 count 1" {
			t.Fatalf("first call: %q", got)
		}
		for _, h := range hostileLines {
			if err := tp.inject(h.line); err != nil {
				t.Fatalf("%s: writing: %v", h.name, err)
			}
			if h.code != 0 {
				m := tp.reply(t, h.name)
				if got := errorCode(m); got != h.code {
					t.Errorf("%s: reply %v, want error code %d", h.name, m, h.code)
				}
				if m["jsonrpc"] != "2.0" {
					t.Errorf("%s: reply %v lacks jsonrpc 2.0", h.name, m)
				}
			}
			// The session, and the toolkit behind it, carry on.
			want++
			if got := textOf(call(t, cs, "count", nil)); got != "kit 1 count "+itoa(want) {
				t.Fatalf("after %s: %q, want kit 1 count %d", h.name, got, want)
			}
		}
		select {
		case err := <-ran:
			t.Fatalf("the server stopped: %v", err)
		default:
		}
		if f.created.Load() != 1 || f.released.Load() != 0 {
			t.Errorf("created %d, released %d toolkits; want one, kept", f.created.Load(), f.released.Load())
		}
		for _, h := range []string{"this is not json", "jsonrpc"} {
			if !strings.Contains(logged.String(), strings.Split(h, " ")[0]) {
				t.Errorf("log does not mention %q:\n%s", h, logged.String())
			}
		}
		if n := strings.Count(logged.String(), "refused a malformed MCP message"); n < len(hostileLines)-1 {
			t.Errorf("%d refusals logged for %d hostile lines:\n%s", n, len(hostileLines), logged.String())
		}
	})
}

func TestLineTransportSkipsATooLongLine(t *testing.T) {
	forEachInput(t, func(t *testing.T, in input) {
		f := &factory{}
		srv := NewServer(f.make, nil)
		defer srv.Close()
		cs, tp, _ := lineSessionMax(t, srv, nil, 4096, in)
		call(t, cs, "count", nil)
		tp.inject(`{"jsonrpc":"2.0","id":"raw-long","method":"ping","params":{"pad":"` + strings.Repeat("x", 100_000) + `"}}`)
		if m := tp.reply(t, "a 100 KB line"); errorCode(m) != jsonrpc.CodeInvalidRequest || m["id"] != nil {
			t.Errorf("a line over MaxLineBytes: %v, want -32600 with id null", m)
		}
		if got := textOf(call(t, cs, "count", nil)); got != "kit 1 count 2" {
			t.Errorf("after the long line: %q", got)
		}
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestLineTransportDropsRepliesToCancelledRequests(t *testing.T) {
	forEachInput(t, func(t *testing.T, in input) {
		f := &factory{progressWait: make(chan struct{})}
		srv := NewServer(f.make, nil)
		defer srv.Close()
		var logged lockedBuffer
		cs, tp, _ := lineSession(t, srv, slog.New(slog.NewTextHandler(&logged, nil)), in)
		call(t, cs, "count", nil)
		// A raw call, so that the test sees its reply if one is sent.
		tp.inject(`{"jsonrpc":"2.0","id":"raw-wait","method":"tools/call","params":{"name":"wait","arguments":{}}}`)
		time.Sleep(20 * time.Millisecond) // let it reach the tool; either order must work
		tp.inject(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"raw-wait","reason":"user"}}`)
		// The server answers an unknown raw method after it handled the
		// cancellation; a reply to raw-wait would come first.
		eventually(t, "the dropped reply is logged", func() bool {
			return strings.Contains(logged.String(), "dropped the reply to a request the client cancelled")
		})
		tp.inject(`{"jsonrpc":"2.0","id":"raw-after","method":"ping"}`)
		m := tp.reply(t, "ping after the cancellation")
		if m["id"] != "raw-after" {
			t.Errorf("got %v, want only the ping's reply (the cancelled request must get none)", m)
		}
		if got := textOf(call(t, cs, "count", nil)); got != "kit 1 count 2" {
			t.Errorf("after the cancelled call: %q", got)
		}
	})
}

func TestNoErrorReplyHasCodeZero(t *testing.T) {
	forEachInput(t, func(t *testing.T, in input) {
		// A failing factory made tools/list answer with code 0.
		f := &factory{fail: io.ErrUnexpectedEOF}
		srv := NewServer(f.make, nil)
		defer srv.Close()
		_, tp, _ := lineSession(t, srv, nil, in)
		tp.inject(`{"jsonrpc":"2.0","id":"raw-list","method":"tools/list"}`)
		m := tp.reply(t, "tools/list")
		if c := errorCode(m); c == 0 || m["error"] == nil {
			t.Errorf("tools/list with a failing factory: %v, want an error with a non-zero code", m)
		}
	})
}

// counterKit is the fuzz test's toolkit: one tool, so no line can end or replace the toolkit
// on purpose (the test factory's "die" would) or block the calls after it ("wait").
func counterKit(context.Context) (*toolkit.Toolkit, func(), error) {
	var n atomic.Int32
	return toolkit.Of(toolkit.New("count", "Count calls.", func(ctx context.Context, _ countIn) (countOut, error) {
		return countOut{Kit: 1, Count: int(n.Add(1))}, nil
	})), func() {}, nil
}

// FuzzLineTransport feeds a random line to the server between two valid
// calls: the second call must work on the same toolkit, and any reply the
// line got must be a JSON-RPC error with a code.
func FuzzLineTransport(f *testing.F) {
	for _, h := range hostileLines {
		f.Add([]byte(h.line))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":"raw-x","method":"tools/call","params":{"name":"count"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"raw-y","result":{}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.ReplaceAll(line, []byte("\n"), []byte(" "))
		var m map[string]json.RawMessage
		if json.Unmarshal(line, &m) == nil {
			if _, err := strconv.ParseInt(string(bytes.TrimSpace(m["id"])), 10, 64); err == nil {
				// The SDK client numbers its own requests 1, 2, 3...: a line with such an
				// id is the same client reusing an id, not a line the server mishandles.
				t.Skip("numeric id: may collide with the client's own request ids")
			}
		}
		srv := NewServer(counterKit, nil)
		defer srv.Close()
		cs, tp, _ := lineSession(t, srv, nil, inputs[0])
		call(t, cs, "count", nil)
		tp.inject(string(line))
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "count"})
		if err != nil {
			t.Fatalf("after %q: %v", line, err)
		}
		// A line that was itself a tools/call of count counts too.
		if got := textOf(res); got != "kit 1 count 2" && got != "kit 1 count 3" {
			t.Fatalf("after %q: %q, want the same toolkit", line, got)
		}
		for {
			select {
			case m := <-tp.replies:
				if _, isErr := m["error"]; isErr && errorCode(m) == 0 {
					t.Fatalf("after %q: an error reply with code 0: %v", line, m)
				}
				continue
			default:
			}
			break
		}
	})
}

// TestLineTransportReadsInReadWhereItCan: on an input whose blocked reads a
// deadline interrupts, Read reads it itself, without a goroutine; Close and
// the end of Read's context still end a Read blocked there, and a last line
// without a newline still arrives before the end of the input.
func TestLineTransportReadsInReadWhereItCan(t *testing.T) {
	connect := func(in io.Reader) *lineConn {
		t.Helper()
		c, err := (&LineTransport{In: in, Out: io.Discard}).Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*lineConn)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := connect(r)
	if c.direct == nil {
		t.Fatal("a LineTransport on os.Pipe reads from a goroutine")
	}
	if ir, iw := io.Pipe(); connect(ir).direct != nil {
		iw.Close()
		t.Fatal("a LineTransport on io.Pipe (no deadlines) reads in Read")
	}

	blocked := func(c *lineConn, ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() { _, err := c.Read(ctx); done <- err }()
		time.Sleep(10 * time.Millisecond) // let it block; the test holds either way
		return done
	}
	expect := func(done <-chan error, want error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Errorf("%s: Read returned %v, want %v", what, err, want)
			}
		case <-time.After(bound):
			t.Fatalf("%s did not end a blocked Read", what)
		}
	}

	// The context's end.
	ctx, cancel := context.WithCancel(context.Background())
	done := blocked(c, ctx)
	cancel()
	expect(done, context.Canceled, "cancelling the context")

	// Close.
	r2, w2, _ := os.Pipe()
	defer w2.Close()
	c2 := connect(r2)
	done = blocked(c2, context.Background())
	c2.Close()
	expect(done, io.EOF, "Close")

	// Messages, the last without a newline, then the end of the input.
	r3, w3, _ := os.Pipe()
	c3 := connect(r3)
	io.WriteString(w3, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n"+`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w3.Close()
	for _, want := range []string{"ping", "notifications/initialized"} {
		msg, err := c3.Read(context.Background())
		if req, ok := msg.(*jsonrpc.Request); err != nil || !ok || req.Method != want {
			t.Fatalf("read %v, %v; want %s", msg, err, want)
		}
	}
	for range 2 { // the end is reported again, not a hang
		if _, err := c3.Read(context.Background()); err != io.EOF {
			t.Fatalf("at the end of the input: %v, want io.EOF", err)
		}
	}
}
