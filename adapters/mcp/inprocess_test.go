package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestInProcessTransportMatchesTheWire runs the same session over the
// go-sdk's in-memory transport (JSON lines through a pipe) and over an
// InProcessTransport: what the client gets must be the same, results and
// protocol errors alike.
func TestInProcessTransportMatchesTheWire(t *testing.T) {
	session := func(pair func() (sdk.Transport, sdk.Transport)) []string {
		srv := NewServer((&factory{}).make, nil)
		defer srv.Close()
		cs, _ := connectOver(t, srv, nil, pair)
		defer cs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		var got []string
		record := func(res any, err error) {
			var we *jsonrpc.Error
			if errors.As(err, &we) {
				got = append(got, "error "+we.Error())
				return
			}
			if err != nil {
				t.Fatalf("an error that is no JSON-RPC error: %v", err)
			}
			data, _ := json.Marshal(res)
			got = append(got, string(data))
		}
		record(cs.ListTools(ctx, nil))
		for _, c := range []struct {
			tool string
			args any
		}{
			{"count", nil}, {"count", map[string]any{}}, {"echo", map[string]any{"text": "héllo \u2028 \"quoted\""}},
			{"echo", map[string]any{"text": "fail"}}, {"echo", map[string]any{"text": 3}}, {"nope", nil}, {"plot", nil}, {"die", nil},
		} {
			record(cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: c.args}))
		}
		record(cs.ListPrompts(ctx, nil)) // no prompts capability: a protocol error
		record(cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "x"}))
		return got
	}
	wire := session(func() (sdk.Transport, sdk.Transport) { return sdk.NewInMemoryTransports() })
	direct := session(func() (sdk.Transport, sdk.Transport) { return NewInProcessTransports() })
	if len(wire) != len(direct) {
		t.Fatalf("%d answers over the wire, %d in process", len(wire), len(direct))
	}
	for i := range wire {
		if wire[i] != direct[i] {
			t.Errorf("answer %d differs:\nover JSON lines: %s\nin process:      %s", i, wire[i], direct[i])
		}
	}
}

// TestInProcessTransportErrorsHaveCodes: a handler's Go error reaches the
// client as a *jsonrpc.Error, with the code of the error it wraps, or -32603
// when it has none (the SDK's own transports send code 0).
func TestInProcessTransportErrorsHaveCodes(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, &sdk.ServerOptions{
		Capabilities: &sdk.ServerCapabilities{Prompts: &sdk.PromptCapabilities{}},
	})
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			switch method {
			case "prompts/list":
				return nil, errors.New("plain failure")
			case "prompts/get":
				return nil, errors.Join(errors.New("wrapped"), &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad", Data: json.RawMessage(`{"x":1}`)})
			}
			return next(ctx, method, req)
		}
	})
	ct, st := NewInProcessTransports()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, c := range []struct {
		err         error
		code        int64
		message     string
		description string
	}{
		{func() error { _, err := cs.ListPrompts(ctx, nil); return err }(), jsonrpc.CodeInternalError, "plain failure", "an error without a code"},
		{func() error { _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "p"}); return err }(), jsonrpc.CodeInvalidParams, "wrapped\nbad", "an error wrapping a coded one"},
	} {
		var we *jsonrpc.Error
		if !errors.As(c.err, &we) || we.Code != c.code || we.Message != c.message || we.Data != nil {
			t.Errorf("%s: the client got %#v (%v), want a *jsonrpc.Error with code %d, message %q and no data (as the wire carries it)", c.description, we, c.err, c.code, c.message)
		}
	}
}

// TestInProcessTransportSharesNoMemory: what one side writes and what the
// other reads are separate copies, so that neither sees the other mutate
// params, results or error data after the hand-over.
func TestInProcessTransportSharesNoMemory(t *testing.T) {
	a, b := connectPair(t)
	ctx := context.Background()

	params := json.RawMessage(`{"text":"original"}`)
	sent := &jsonrpc.Request{ID: id(7), Method: "tools/call", Params: params, Extra: "transport-only"}
	if err := a.Write(ctx, sent); err != nil {
		t.Fatal(err)
	}
	copy(params, `{"text":"CHANGED!"}`) // the sender reuses its buffer
	msg, err := b.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := msg.(*jsonrpc.Request)
	if got == sent || string(got.Params) != `{"text":"original"}` || got.Extra != nil || got.ID != sent.ID || got.Method != "tools/call" {
		t.Fatalf("received %p %+v (params %s), want a new request with the params as written and no Extra", got, got, got.Params)
	}
	copy(got.Params, `{"text":"receiver"}`) // the receiver edits what it got
	got.ID = jsonrpc.ID{}
	if string(params) != `{"text":"CHANGED!"}` || sent.ID != id(7) {
		t.Fatalf("the receiver's edits reached the sender: %s %v", params, sent.ID.Raw())
	}

	result := json.RawMessage(`{"content":[]}`)
	data := json.RawMessage(`{"detail":"d"}`)
	werr := &jsonrpc.Error{Code: -32001, Message: "custom", Data: data}
	if err := b.Write(ctx, &jsonrpc.Response{ID: id("s"), Result: result, Error: werr}); err != nil {
		t.Fatal(err)
	}
	copy(result, `{"CHANGED!":[]}`)
	copy(data, `{"CHANGED":"d"}`)
	msg, err = a.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp := msg.(*jsonrpc.Response)
	we, ok := resp.Error.(*jsonrpc.Error)
	if string(resp.Result) != `{"content":[]}` || !ok || we == werr || we.Code != -32001 || we.Message != "custom" || string(we.Data) != `{"detail":"d"}` || resp.ID != id("s") {
		t.Fatalf("received %+v (result %s, error %#v), want copies of what was written", resp, resp.Result, resp.Error)
	}
}

// TestInProcessTransportRefusesWhatTheWireCannotCarry: params, results and
// error data that are not JSON fail the Write (encoding them would), and the
// connection carries on.
func TestInProcessTransportRefusesWhatTheWireCannotCarry(t *testing.T) {
	a, b := connectPair(t)
	ctx := context.Background()
	for _, m := range []jsonrpc.Message{
		&jsonrpc.Request{ID: id(1), Method: "m", Params: json.RawMessage(`{"a":`)},
		&jsonrpc.Response{ID: id(1), Result: json.RawMessage(`nope`)},
		&jsonrpc.Response{ID: id(1), Error: &jsonrpc.Error{Code: 1, Message: "m", Data: json.RawMessage(`{`)}},
		&jsonrpc.Response{Result: json.RawMessage(`{}`)}, // no id: the receiver could not match it
		nil,
	} {
		if err := a.Write(ctx, m); err == nil {
			t.Errorf("Write(%#v) succeeded, want an error", m)
		}
	}
	if err := a.Write(ctx, &jsonrpc.Request{Method: "notifications/initialized"}); err != nil {
		t.Fatal(err)
	}
	if msg, err := b.Read(ctx); err != nil || msg.(*jsonrpc.Request).Method != "notifications/initialized" {
		t.Fatalf("after refused writes: %v %v, want the next message", msg, err)
	}
}

// TestInProcessTransportClose: Close on either end ends the connection; the
// other end reads what was written before, in order, then io.EOF; a Read
// waiting for a message returns; writes fail afterwards.
func TestInProcessTransportClose(t *testing.T) {
	a, b := connectPair(t)
	ctx := context.Background()
	for _, m := range []string{"one", "two"} {
		if err := a.Write(ctx, &jsonrpc.Request{Method: m}); err != nil {
			t.Fatal(err)
		}
	}
	waiting := make(chan error, 1)
	go func() { _, err := a.Read(ctx); waiting <- err }()
	time.Sleep(10 * time.Millisecond) // let the Read block (it must return either way)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if err != io.EOF {
			t.Errorf("a Read blocked when its end closed returned %v, want io.EOF", err)
		}
	case <-time.After(bound):
		t.Fatal("Close did not unblock a Read")
	}
	for _, want := range []string{"one", "two"} {
		msg, err := b.Read(ctx)
		if err != nil || msg.(*jsonrpc.Request).Method != want {
			t.Fatalf("the other end read %v, %v; want %q, written before Close", msg, err, want)
		}
	}
	if _, err := b.Read(ctx); err != io.EOF {
		t.Errorf("after the messages: %v, want io.EOF", err)
	}
	for name, c := range map[string]sdk.Connection{"closed end": a, "other end": b} {
		if err := c.Write(ctx, &jsonrpc.Request{Method: "late"}); !errors.Is(err, sdk.ErrConnectionClosed) {
			t.Errorf("Write on the %s after Close: %v, want ErrConnectionClosed", name, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// A Read ends with its context, too.
	c, _ := connectPair(t)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := c.Read(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Read with an expired context: %v, want DeadlineExceeded", err)
	}
}

func TestInProcessTransportConnectsOnce(t *testing.T) {
	x, _ := NewInProcessTransports()
	if _, err := x.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Connect(context.Background()); err == nil {
		t.Error("a second Connect of the same end succeeded")
	}
	if _, err := new(InProcessTransport).Connect(context.Background()); err == nil {
		t.Error("the zero InProcessTransport connected")
	}
}

// connectPair connects both ends of a new in-process link.
func connectPair(t *testing.T) (sdk.Connection, sdk.Connection) {
	t.Helper()
	x, y := NewInProcessTransports()
	a, err := x.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := y.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// id makes a JSON-RPC id from an int or a string.
func id(v any) jsonrpc.ID {
	if n, ok := v.(int); ok {
		v = float64(n)
	}
	i, err := jsonrpc.MakeID(v)
	if err != nil {
		panic(err)
	}
	return i
}
