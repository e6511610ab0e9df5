//go:build linux

package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// tryConn is a socket's end with TryWrite, as the local backend's stream
// has (sandbox/local/stream.go): the agent's read loop then writes the
// replies it answers itself (server.answer). limit > 0 makes each
// TryWrite take at most limit bytes, so that every longer reply is cut
// part way through a frame and its rest goes through writeLoop.
type tryConn struct {
	net.Conn
	limit          int
	tries, partial atomic.Int64
}

func (c *tryConn) TryWrite(p []byte) (int, error) {
	c.tries.Add(1)
	if c.limit > 0 && len(p) > c.limit {
		p = p[:c.limit]
		c.partial.Add(1)
	}
	rc, err := c.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, e := syscall.Write(int(fd), p[n:])
			switch e {
			case nil:
				n += m
			case syscall.EINTR:
			case syscall.EAGAIN:
				return true // full: the caller queues the rest
			default:
				werr = e
				return true
			}
		}
		return true
	}); err != nil {
		return n, err
	}
	return n, werr
}

// check fails the test if the read loop never wrote a reply itself (or,
// with a limit, never had one cut short): the path under test was not
// taken.
func (c *tryConn) check(t *testing.T) {
	t.Helper()
	t.Logf("TryWrite: %d calls, %d cut short", c.tries.Load(), c.partial.Load())
	if c.tries.Load() == 0 {
		t.Error("the read loop never wrote a reply itself")
	}
	if c.limit > 0 && c.partial.Load() == 0 {
		t.Error("no reply was cut part way")
	}
}

// Replies the read loop writes itself, cut part way through their frames
// by a full stream, reach their callers whole and in one piece while
// handlers write their own replies and a command streams its output on
// the same stream: nothing else is written between a reply's parts.
func TestInlineRepliesCutShortArriveWhole(t *testing.T) {
	for _, limit := range []int{0, 3, 700} {
		t.Run(fmt.Sprintf("cut=%d", limit), func(t *testing.T) {
			dir := t.TempDir()
			files := map[string][]byte{}
			for i := range 8 {
				name := fmt.Sprintf("f%d.bin", i)
				data := bytes.Repeat([]byte{byte('a' + i)}, 100+i*300)
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
				files[name] = data
			}
			tc := &tryConn{limit: limit}
			c, _, _ := servePairWrapped(t, ServeOptions{}, wire.Hello{Workspace: dir, Env: []string{"PATH=/usr/bin:/bin"}},
				func(a net.Conn) io.ReadWriteCloser { tc.Conn = a; return tc })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out atomic.Int64
			stream, err := c.Start("exec", wire.ExecRequest{Args: []string{"/bin/sh", "-c", "head -c 3000000 /dev/zero"}, TimeoutMs: 60000},
				agent.Handlers{OnData: func(_ wire.FrameType, p []byte) { out.Add(int64(len(p))) }})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 150 {
						name := fmt.Sprintf("f%d.bin", (g+i)%8)
						var rep wire.FSReadReply
						if err := c.Do(ctx, "fs.read", wire.FSReadRequest{Path: name}, &rep); err != nil || !bytes.Equal(rep.Data, files[name]) {
							errs <- fmt.Errorf("fs.read %s: %d bytes, %v", name, len(rep.Data), err)
							return
						}
						if i%10 == 0 { // answered by a handler, not the read loop
							if err := c.Do(ctx, "job.list", nil, nil); err != nil {
								errs <- fmt.Errorf("job.list: %v", err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if _, err := stream.Wait(); err != nil || out.Load() != 3000000 {
				t.Errorf("the streaming command: %d of 3000000 bytes, %v", out.Load(), err)
			}
			tc.check(t)
		})
	}
}
