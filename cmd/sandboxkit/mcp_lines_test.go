package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// rawSession is `sandboxkit mcp` driven line by line over its real stdin
// and stdout, for lines no SDK client would send.
type rawSession struct {
	cmd   *exec.Cmd
	stdin interface {
		Write([]byte) (int, error)
		Close() error
	}
	out *lineLog // stdout, one JSON-RPC message per line
	srv *mcpServer
}

func startRaw(t *testing.T) *rawSession {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"mcp"}, isolationFlags(t)...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s := &rawSession{cmd: cmd, stdin: stdin, out: newLineLog(stdout), srv: &mcpServer{cmd: cmd, log: newLineLog(r)}}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		r.Close()
	})
	s.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	s.reply(t, "init")
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *rawSession) send(t *testing.T, line string) {
	t.Helper()
	if _, err := s.stdin.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("writing %q: %v (the server is gone?)\nstderr:\n%s", line, err, s.srv.log)
	}
}

// reply waits for the reply with string id.
func (s *rawSession) reply(t *testing.T, id string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	want := fmt.Sprintf("%q", id)
	line, err := s.out.wait(ctx, func(l string) bool {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(l), &m) != nil {
			return false
		}
		return string(m["id"]) == want
	})
	if err != nil {
		t.Fatalf("no reply with id %s (%v); stdout:\n%s\nstderr:\n%s", id, err, s.out, s.srv.log)
	}
	var m map[string]any
	json.Unmarshal([]byte(line), &m)
	return m
}

func (s *rawSession) run(t *testing.T, id, command string) string {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"name": "run_command", "arguments": map[string]any{"command": command}})
	s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":%s}`, id, args))
	m := s.reply(t, id)
	res, _ := json.Marshal(m["result"])
	return string(res)
}

// TestMCPStdioSurvivesMalformedLines: one bad line on stdin made the
// server exit with status 1 (go-sdk's stdio transport ended the session),
// losing the sandbox. Each line now gets its JSON-RPC error, and the same
// sandbox serves the next call.
func TestMCPStdioSurvivesMalformedLines(t *testing.T) {
	s := startRaw(t)
	if got := s.run(t, "setup", "echo kept > state.txt && echo ok"); !strings.Contains(got, "ok") {
		t.Fatalf("setup call: %s", got)
	}
	lines := []struct {
		name, line, id string
		code           float64
	}{
		{"garbage", "garbage garbage", "null", -32700},
		{"truncated JSON", `{"jsonrpc":"2.0","id":"t1","method":"tools/ca`, "null", -32700},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":\"u1\",\"method\":\"ping\",\"x\":\"\xc3\x28\"}", "null", -32700},
		{"batch array", `[{"jsonrpc":"2.0","id":"b1","method":"ping"}]`, "null", -32600},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":"v1","method":"ping"}`, "v1", -32600},
	}
	for i, l := range lines {
		s.send(t, l.line)
		var m map[string]any
		if l.id == "null" {
			// Replies with id null come in order: this line's is the last.
			m = s.nthNull(t, countNull(lines[:i+1])-1)
		} else {
			m = s.reply(t, l.id)
		}
		e, _ := m["error"].(map[string]any)
		if e == nil || e["code"] != l.code {
			t.Errorf("%s: reply %v, want error code %v", l.name, m, l.code)
		}
		if got := s.run(t, fmt.Sprintf("after-%d", i), "cat state.txt"); !strings.Contains(got, "kept") {
			t.Fatalf("after %s the sandbox lost its file: %s\nstderr:\n%s", l.name, got, s.srv.log)
		}
	}
	if n := len(s.srv.created()); n != 1 {
		t.Errorf("%d sandboxes created, want the one session's sandbox throughout", n)
	}
	if !strings.Contains(s.srv.log.String(), "refused a malformed MCP message") {
		t.Errorf("the refusals are not logged:\n%s", s.srv.log)
	}
	s.stdin.Close()
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("the server exited with %v after its stdin closed, want status 0\nstderr:\n%s", err, s.srv.log)
	}
}

func countNull(lines []struct {
	name, line, id string
	code           float64
}) int {
	n := 0
	for _, l := range lines {
		if l.id == "null" {
			n++
		}
	}
	return n
}

// nthNull returns the n-th (0-based) reply with id null.
func (s *rawSession) nthNull(t *testing.T, n int) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	seen := 0
	line, err := s.out.wait(ctx, func(l string) bool {
		if !strings.Contains(l, `"id":null`) {
			return false
		}
		seen++
		return seen == n+1
	})
	if err != nil {
		t.Fatalf("no reply #%d with id null (%v); stdout:\n%s\nstderr:\n%s", n, err, s.out, s.srv.log)
	}
	var m map[string]any
	json.Unmarshal([]byte(line), &m)
	return m
}
