package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// BenchmarkRunCommandOverMCP measures one run_command("true") as an MCP
// client sees it from `sandboxkit mcp` over stdio, against the floors of
// the same command run with the library in this process and of the same
// tool called through toolkit.Call (a warm sandbox each time): MCP's cost
// is mcp=stdio over floor=toolkit.Call.
//
//	go test -run '^$' -bench RunCommandOverMCP ./cmd/sandboxkit
func BenchmarkRunCommandOverMCP(b *testing.B) {
	var allowWeaker []sandbox.Option
	flags := isolationFlags(b)
	if len(flags) > 0 {
		allowWeaker = append(allowWeaker, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	}
	b.Run("floor=Commands.Run", func(b *testing.B) {
		ctx := context.Background()
		sb, err := sandbox.New(ctx, allowWeaker...)
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close()
		for b.Loop() {
			if res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "true"}); err != nil || res.ExitCode != 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor=toolkit.Call", func(b *testing.B) {
		// The same tool in this process: what the tool itself adds to
		// the command (its wrapping and rendering), apart from MCP.
		ctx := context.Background()
		sb, err := sandbox.New(ctx, allowWeaker...)
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close()
		kit := toolkit.ForSandbox(sb)
		args := json.RawMessage(`{"command":"true"}`)
		for b.Loop() {
			if res, err := kit.Call(ctx, "run_command", args); err != nil || res.IsError || !strings.Contains(res.Text, "exit code: 0") {
				b.Fatal(err, res.Text)
			}
		}
	})
	b.Run("mcp=stdio", func(b *testing.B) {
		ctx := context.Background()
		c, _ := newClient()
		cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: exec.Command(binary, append([]string{"mcp"}, flags...)...)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		args := map[string]any{"command": "true"}
		for b.Loop() {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: args})
			if err != nil || res.IsError || !strings.Contains(text(res), "exit code: 0") {
				b.Fatal(err, res)
			}
		}
	})
}
