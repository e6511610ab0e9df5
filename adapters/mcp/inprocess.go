package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// InProcessTransport connects an MCP client and server in the same process
// by handing each JSON-RPC message to the other side as a Go value: no JSON
// encoding, no pipe, no decoding. Make the two ends with
// [NewInProcessTransports]; use one with [Server.Run] (or the go-sdk's
// Server.Connect) and the other with the go-sdk's Client.Connect.
//
// Use it instead of the go-sdk's InMemoryTransport whenever client and
// server share a process. That transport writes every message as a JSON
// line into a net.Pipe, where a reader goroutine decodes it again: in
// go-sdk v1.8.0 each message costs an encode, a copy through the pipe, a
// goroutine hand-off and two or three JSON decodes (a batch probe, the
// envelope, a request's method name), each of which allocates a 32 KiB
// buffer. Of the 390 KB and eleven decodes a tool call allocated in
// memory, five decodes (166 KB) were that transport's; the other six are
// the SDK's dispatch (params, _meta, the result), which every transport
// pays (BenchmarkCall: sdk=trivial-tool against sdk=trivial-tool-in-process;
// docs/upstream.md).
//
// What crosses is what the wire would carry, and nothing either side can
// change under the other:
//
//   - the receiver gets a new Request or Response; params, results and
//     error data are copied, so that neither side sees the other mutate
//     them (the SDK's jsonrpc2 layer rewrites fields of requests it
//     receives, and middleware may keep or edit params);
//   - params, results and error data must be valid JSON, as encoding them
//     would require: a Write of anything else fails;
//   - Request.Extra and Response.Extra stay behind: they are transport
//     information that is never sent;
//   - an error travels as a *jsonrpc.Error, as on the wire: its message
//     and the code of the *jsonrpc.Error it wraps, or -32603 (internal
//     error) when it has none (the SDK's wire encoding would send code 0,
//     which JSON-RPC does not define; see [LineTransport]).
//
// Messages are delivered in order and a Write never waits for the reader:
// each direction is an unbounded queue, so two sides writing to each other
// at once cannot deadlock. Close on either end ends the connection: the
// other end still reads what was written before, then io.EOF; writes after
// Close fail with the go-sdk's ErrConnectionClosed.
type InProcessTransport struct {
	link      *inProcessLink
	in, out   *messageQueue
	connected atomic.Bool
}

// NewInProcessTransports returns the two ends of an in-process connection.
// They are symmetric: either end can serve and the other connect, in any
// order.
func NewInProcessTransports() (*InProcessTransport, *InProcessTransport) {
	link := &inProcessLink{closed: make(chan struct{})}
	a, b := newMessageQueue(), newMessageQueue()
	return &InProcessTransport{link: link, in: a, out: b}, &InProcessTransport{link: link, in: b, out: a}
}

// Connect implements the go-sdk's Transport interface. An end connects
// once.
func (t *InProcessTransport) Connect(context.Context) (sdk.Connection, error) {
	if t.link == nil {
		return nil, errors.New("mcp.InProcessTransport: make it with NewInProcessTransports")
	}
	if t.connected.Swap(true) {
		return nil, errors.New("mcp.InProcessTransport: this end is already connected")
	}
	return &inProcessConn{t: t}, nil
}

// inProcessLink is the state both ends share: whether the connection is
// closed.
type inProcessLink struct {
	once   sync.Once
	closed chan struct{}
}

func (l *inProcessLink) close() { l.once.Do(func() { close(l.closed) }) }

// messageQueue is one direction of a link: a FIFO that never blocks its
// writer. ready holds a token while the queue may be non-empty, so that a
// reader sleeps on a channel rather than polling.
type messageQueue struct {
	mu    sync.Mutex
	msgs  []jsonrpc.Message
	head  int
	ready chan struct{}
}

func newMessageQueue() *messageQueue { return &messageQueue{ready: make(chan struct{}, 1)} }

func (q *messageQueue) push(m jsonrpc.Message) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default: // a token is there already
	}
}

func (q *messageQueue) pop() (jsonrpc.Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.msgs) {
		return nil, false
	}
	m := q.msgs[q.head]
	q.msgs[q.head] = nil
	if q.head++; q.head == len(q.msgs) {
		// Empty again: reuse the array from its start, so that a
		// connection with one message in flight at a time allocates
		// nothing here.
		q.msgs, q.head = q.msgs[:0], 0
	}
	return m, true
}

// inProcessConn is one connected end.
type inProcessConn struct {
	t      *InProcessTransport
	closed atomic.Bool // this end was closed (its reads end at once)
}

func (c *inProcessConn) SessionID() string { return "" }

// Read returns the next message the other end wrote. After the other end
// closed, it returns what is left, then io.EOF; after this end closed,
// io.EOF at once.
func (c *inProcessConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		if c.closed.Load() {
			return nil, io.EOF
		}
		if m, ok := c.t.in.pop(); ok {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.t.in.ready:
		case <-c.t.link.closed:
			if m, ok := c.t.in.pop(); ok && !c.closed.Load() {
				return m, nil
			}
			return nil, io.EOF
		}
	}
}

// Write hands a copy of msg to the other end.
func (c *inProcessConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.t.link.closed:
		return sdk.ErrConnectionClosed
	default:
	}
	m, err := copyMessage(msg)
	if err != nil {
		return err
	}
	c.t.out.push(m)
	return nil
}

// Close ends the connection for both ends. It is idempotent.
func (c *inProcessConn) Close() error {
	c.closed.Store(true)
	c.t.link.close()
	return nil
}

// copyMessage returns what the receiver of msg would decode from its JSON
// encoding, sharing no memory with msg.
func copyMessage(msg jsonrpc.Message) (jsonrpc.Message, error) {
	switch m := msg.(type) {
	case *jsonrpc.Request:
		params, err := copyJSON("params", m.Params)
		if err != nil {
			return nil, err
		}
		return &jsonrpc.Request{ID: m.ID, Method: m.Method, Params: params}, nil
	case *jsonrpc.Response:
		if !m.ID.IsValid() {
			// The wire form would be refused by the receiver's decoder.
			return nil, errors.New("mcp.InProcessTransport: a response without an id")
		}
		result, err := copyJSON("result", m.Result)
		if err != nil {
			return nil, err
		}
		r := &jsonrpc.Response{ID: m.ID, Result: result}
		if m.Error != nil {
			we, err := wireError(m.Error)
			if err != nil {
				return nil, err
			}
			r.Error = we
		}
		return r, nil
	case nil:
		return nil, errors.New("mcp.InProcessTransport: a nil message")
	}
	return nil, fmt.Errorf("mcp.InProcessTransport: unknown message type %T", msg)
}

// wireError is the *jsonrpc.Error the receiver would decode for err: err
// itself (copied) when it is one, else err's message with the code of the
// *jsonrpc.Error it wraps. Code 0, undefined in JSON-RPC, becomes -32603.
func wireError(err error) (*jsonrpc.Error, error) {
	out := &jsonrpc.Error{Message: err.Error()}
	if we, ok := err.(*jsonrpc.Error); ok {
		data, err := copyJSON("error data", we.Data)
		if err != nil {
			return nil, err
		}
		out.Code, out.Data = we.Code, data
	} else if errors.As(err, &we) {
		out.Code = we.Code
	}
	if out.Code == 0 {
		out.Code = jsonrpc.CodeInternalError
	}
	return out, nil
}

// copyJSON copies raw, refusing what is not JSON (encoding it would have
// failed). Empty stays nil, as an omitted field decodes. The check is one
// scan of the bytes, which encoding them for the wire would have made too
// (a RawMessage is compacted), and the receiver decodes them at least once
// more; in BenchmarkCall (mcp=in-memory, A/B alternated, load ~25) it was
// within the noise of the CPU per call.
func copyJSON(what string, raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("mcp.InProcessTransport: the %s: not valid JSON", what)
	}
	return append(json.RawMessage(nil), raw...), nil
}
