//go:build linux

package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// WorkspaceDir opens another directory as the workspace that requests
// name by the Hello's path: absolute paths under that path reach it, and
// confinement is the opened directory's.
func TestWorkspaceDirServesAnotherDirectoryUnderTheHellosPath(t *testing.T) {
	host := t.TempDir()
	c, _ := servePair(t, ServeOptions{WorkspaceDir: host}, wire.Hello{Workspace: "/workspace", Env: []string{"PATH=/usr/bin:/bin"}})
	ctx := context.Background()
	if err := c.Do(ctx, "fs.write", wire.FSWriteRequest{Path: "/workspace/a/b.txt", Data: []byte("hi")}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(host, "a", "b.txt")); err != nil || string(got) != "hi" {
		t.Fatalf("the file in the opened directory: %q, %v", got, err)
	}
	var e wire.Entry
	if err := c.Do(ctx, "fs.stat", wire.FSPathRequest{Path: "a/b.txt"}, &e); err != nil || e.Size != 2 {
		t.Fatalf("stat by a relative path: %+v %v", e, err)
	}
	err := c.Do(ctx, "fs.write", wire.FSWriteRequest{Path: host + "/x", Data: []byte("x")}, nil)
	if we, ok := err.(*wire.WireError); !ok || we.Code != wire.CodePathEscape {
		t.Fatalf("a write by the opened directory's own path: %v, want %s", err, wire.CodePathEscape)
	}
}

// Observe sees every request's operation and arguments as it arrives,
// and its error as it ends, for requests served inline and by a handler.
func TestObserveSeesEachRequestAndHowItEnded(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	observe := func(op string, args json.RawMessage) func(*wire.WireError) {
		var a struct{ Path string }
		_ = json.Unmarshal(args, &a)
		return func(e *wire.WireError) {
			code := "ok"
			if e != nil {
				code = e.Code
			}
			mu.Lock()
			seen = append(seen, op+" "+a.Path+" "+code)
			mu.Unlock()
		}
	}
	c, _ := servePair(t, ServeOptions{Observe: observe}, wire.Hello{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	ctx := context.Background()
	_ = c.Do(ctx, "fs.write", wire.FSWriteRequest{Path: "f.txt", Data: []byte("x")}, nil)
	_ = c.Do(ctx, "fs.read", wire.FSReadRequest{Path: "f.txt"}, nil)   // inline
	_ = c.Do(ctx, "fs.stat", wire.FSPathRequest{Path: "missing"}, nil) // inline, failing
	_ = c.Do(ctx, "fs.mkdir", wire.FSPathRequest{Path: "../out"}, nil) // handler, failing
	mu.Lock()
	defer mu.Unlock()
	want := []string{"fs.write f.txt ok", "fs.read f.txt ok", "fs.stat missing NOT_FOUND", "fs.mkdir ../out PATH_ESCAPE"}
	if len(seen) != len(want) {
		t.Fatalf("observed %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("observed %q, want %q", seen, want)
		}
	}
}
