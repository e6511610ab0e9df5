package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// scriptedAgent is the agent's end of a stream, answering requests as the
// test says: answer returns the reply's result for a request (ok false:
// no reply at all, a hung agent).
type scriptedAgent struct {
	conn   net.Conn
	wmu    sync.Mutex
	answer func(id uint32, req wire.Request) (result any, ok bool)
}

// dialScripted returns a client connected to a scripted agent over an
// in-memory stream (which, like the local backend's, has read deadlines).
func dialScripted(t *testing.T, answer func(id uint32, req wire.Request) (any, bool)) (*Client, *scriptedAgent) {
	return dialScriptedOver(t, true, answer)
}

func dialScriptedOver(t *testing.T, deadlines bool, answer func(id uint32, req wire.Request) (any, bool)) (*Client, *scriptedAgent) {
	t.Helper()
	hostEnd, agentEnd := net.Pipe()
	a := &scriptedAgent{conn: agentEnd, answer: answer}
	go a.serve()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var conn io.ReadWriteCloser = hostEnd
	if !deadlines { // a stream that cannot be interrupted
		conn = struct {
			io.Reader
			io.Writer
			io.Closer
		}{hostEnd, hostEnd, hostEnd}
	}
	c, err := Dial(ctx, conn, wire.Hello{Workspace: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); agentEnd.Close() })
	return c, a
}

func (a *scriptedAgent) send(id uint32, t wire.FrameType, payload []byte) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_ = wire.WriteFrame(a.conn, id, t, payload)
}

func (a *scriptedAgent) reply(id uint32, result any) {
	b, _ := json.Marshal(result)
	a.send(id, wire.FrameReply, append(append([]byte(wire.ReplyPrefix), b...), '}'))
}

func (a *scriptedAgent) serve() {
	f, err := wire.ReadFrame(a.conn)
	if err != nil || f.Type != wire.FrameHello {
		return
	}
	res, _ := json.Marshal(wire.HelloReply{Version: wire.Version})
	msg, _ := json.Marshal(wire.Reply{Result: res})
	a.send(0, wire.FrameHelloOK, msg)
	for {
		f, err := wire.ReadFrame(a.conn)
		if err != nil {
			return
		}
		if f.Type != wire.FrameRequest {
			continue // cancels, acks: a scripted agent ignores them
		}
		var req wire.Request
		if err := json.Unmarshal(f.Payload, &req); err != nil {
			return
		}
		// Each request is answered on its own goroutine, so replies may
		// come in any order.
		go func() {
			if res, ok := a.answer(f.ID, req); ok {
				a.reply(f.ID, res)
			}
		}()
	}
}

// A call whose caller reads its own reply (a direct call) and whose
// context ends while the agent never answers returns the context's error
// after the grace the agent gets to confirm a cancel, as a call waiting
// for the background reader does; the client stays usable and its next
// calls get their replies.
func TestCancelledCallOnAHungAgentReturns(t *testing.T) {
	for _, deadlines := range []bool{true, false} {
		t.Run(fmt.Sprintf("deadlines=%v", deadlines), func(t *testing.T) { testCancelledCallOnAHungAgent(t, deadlines) })
	}
}

func testCancelledCallOnAHungAgent(t *testing.T, deadlines bool) {
	c, _ := dialScriptedOver(t, deadlines, func(id uint32, req wire.Request) (any, bool) {
		if req.Op == "hang" {
			return nil, false
		}
		return map[string]string{"op": req.Op}, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Do(ctx, "hang", nil, nil) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do on a hung agent: %v, want the context's deadline", err)
		}
		t.Logf("returned after %v", time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("Do on a hung agent did not return 30 s after its context ended")
	}
	for i := range 20 {
		var out map[string]string
		if err := c.Do(context.Background(), fmt.Sprint("op", i), nil, &out); err != nil || out["op"] != fmt.Sprint("op", i) {
			t.Fatalf("call %d after the abandoned one: %v, %v", i, out, err)
		}
	}
}

// Many goroutines calling at once, with replies coming in any order and a
// streaming call beside them, each get their own reply: whichever caller
// holds the reader role delivers the others' replies and the stream's
// data.
func TestConcurrentCallsGetTheirOwnReplies(t *testing.T) {
	c, a := dialScripted(t, func(id uint32, req wire.Request) (any, bool) {
		if req.Op == "stream" {
			return nil, false // answered by the test below
		}
		time.Sleep(time.Duration(id%3) * time.Millisecond)
		return map[string]string{"op": req.Op}, true
	})
	calls := func(stream *Call) {
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					op := fmt.Sprintf("g%d-%d", g, i)
					if stream != nil && i%7 == 0 {
						a.send(stream.id, wire.FrameStdout, []byte("x"))
					}
					var out map[string]string
					ctx := context.Background()
					if i%2 == 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, time.Minute)
						defer cancel()
					}
					if err := c.Do(ctx, op, nil, &out); err != nil || out["op"] != op {
						errs <- fmt.Errorf("%s: got %v, %v", op, out, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	calls(nil)
	var got []byte
	var gmu sync.Mutex
	stream, err := c.Start("stream", nil, Handlers{OnData: func(_ wire.FrameType, b []byte) {
		gmu.Lock()
		got = append(got, b...)
		gmu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	calls(stream)
	a.reply(stream.id, map[string]int{"n": 1})
	if _, err := stream.Wait(); err != nil {
		t.Fatal(err)
	}
	gmu.Lock()
	defer gmu.Unlock()
	if want := 8 * 8; len(got) != want {
		t.Errorf("the streaming call got %d bytes of output, want %d", len(got), want)
	}
	calls(nil)
}

// An idle client whose callers read their own replies still sees the
// agent's death (Done) without a call: the background reader takes the
// stream back after linger.
func TestIdleClientSeesTheAgentDie(t *testing.T) {
	c, a := dialScripted(t, func(id uint32, req wire.Request) (any, bool) { return struct{}{}, true })
	for range 10 {
		if err := c.Do(context.Background(), "ping", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	a.conn.Close()
	select {
	case <-c.Done():
		if err := c.Err(); !errors.Is(err, ErrDead) || errors.Is(err, ErrClosed) {
			t.Fatalf("Err after the agent's end: %v, want ErrDead", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not see the agent's end in 30 s")
	}
	if err := c.Do(context.Background(), "ping", nil, nil); !errors.Is(err, ErrDead) {
		t.Fatalf("a call after the agent's end: %v, want ErrDead", err)
	}
}

// Close ends a call blocked reading its own reply with ErrClosed, and
// waits for the client's goroutines.
func TestCloseEndsADirectCall(t *testing.T) {
	c, _ := dialScripted(t, func(id uint32, req wire.Request) (any, bool) { return nil, req.Op != "hang" })
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), "hang", nil, nil) }()
	time.Sleep(50 * time.Millisecond) // let it block in its read
	if err := c.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the call cut by Close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not end the blocked call")
	}
}
