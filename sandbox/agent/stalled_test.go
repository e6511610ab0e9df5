package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// gatedConn is the agent's end of a stream that stops reading while its
// gate is shut: an agent that was stopped, froze, or turned hostile.
type gatedConn struct {
	net.Conn
	mu   sync.Mutex
	open chan struct{} // closed: reads go on
}

func (g *gatedConn) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedConn) reopen() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gatedConn) Read(p []byte) (int, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	<-open
	return g.Conn.Read(p)
}

// Calls keep their deadlines while the agent reads nothing, on a stream
// with write deadlines and on one without (Kubernetes' attach stream,
// where the client writes on a goroutine): a request the stream cannot
// take ends with the caller's error at its deadline, a call queued behind
// it too, and once the agent reads again every call works. (The old
// client's Write blocked for good under the write lock.)
func TestCallsKeepTheirDeadlinesOnAStalledStream(t *testing.T) {
	for _, deadlines := range []bool{true, false} {
		t.Run(fmt.Sprintf("deadlines=%v", deadlines), func(t *testing.T) {
			hostEnd, agentEnd := net.Pipe()
			g := &gatedConn{Conn: agentEnd, open: make(chan struct{})}
			close(g.open)
			a := &scriptedAgent{conn: g, answer: func(id uint32, req wire.Request) (any, bool) {
				return map[string]string{"op": req.Op}, true
			}}
			go a.serve()
			var conn io.ReadWriteCloser = hostEnd
			if !deadlines {
				conn = struct {
					io.Reader
					io.Writer
					io.Closer
				}{hostEnd, hostEnd, hostEnd}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Dial(ctx, conn, wire.Hello{Workspace: "/w"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(); agentEnd.Close() })
			if (c.wdl != nil) != deadlines {
				t.Fatalf("write deadlines %v, want %v", c.wdl != nil, deadlines)
			}
			var out map[string]string
			if err := c.Do(context.Background(), "before", nil, &out); err != nil || out["op"] != "before" {
				t.Fatalf("before the stall: %v, %v", out, err)
			}

			g.shut()
			big := map[string]string{"data": strings.Repeat("x", 1<<20)}
			for _, op := range []string{"big", "queued"} {
				var args any
				if op == "big" {
					args = big
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				done := make(chan error, 1)
				go func() { done <- c.Do(cctx, op, args, nil) }()
				select {
				case err := <-done:
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("%s on a stalled stream: %v, want the context's deadline", op, err)
					}
				case <-time.After(20 * time.Second):
					g.reopen()
					ccancel()
					t.Fatalf("%s with a 200 ms deadline had not returned after 20 s on a stream nobody reads", op)
				}
				ccancel()
			}

			g.reopen()
			for i := range 5 {
				op := fmt.Sprint("after", i)
				if err := c.Do(context.Background(), op, nil, &out); err != nil || out["op"] != op {
					t.Fatalf("after the agent went on: %v, %v", out, err)
				}
			}
		})
	}
}
