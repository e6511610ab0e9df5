package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http/httptest"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCall measures what MCP adds to a tool call, against the floor
// of calling the same toolkit directly in the same run:
//
//   - floor=toolkit.Call: the toolkit alone (decode, validate, run, render);
//
//   - sdk=trivial-tool: the go-sdk alone, client and server, in memory, with
//     a tool that returns a constant: what any go-sdk server costs per call,
//     before this adapter does anything;
//
//   - sdk=trivial-tool-in-process: the same over an InProcessTransport:
//     the SDK's dispatch alone, without its in-memory transport's JSON
//     lines (sdk=trivial-tool minus this is what that transport costs);
//
//   - mcp=in-memory: this server and a go-sdk client over an
//     InProcessTransport, what an in-process user runs: the SDK's
//     dispatch on both sides plus this adapter;
//
//   - mcp=sdk-in-memory: the same over the go-sdk's InMemoryTransport;
//
//   - mcp=lines: this server over a LineTransport (the stdio transport of
//     `sandboxkit mcp`) on an in-memory pipe, driven by raw JSON lines: what
//     a call costs the server, whatever language the client is written in;
//
//   - mcp=streamable-http: a go-sdk client over loopback streamable HTTP.
//
//     go test -run '^$' -bench Call -benchmem -count 5 ./adapters/mcp
func BenchmarkCall(b *testing.B) {
	args := map[string]any{"text": "hello"}
	raw, _ := json.Marshal(args)
	f := &factory{}
	kit, release, _ := f.make(context.Background())
	defer release()
	b.Run("floor=toolkit.Call", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			if res, err := kit.Call(ctx, "echo", raw); err != nil || res.IsError {
				b.Fatal(err, res.Text)
			}
		}
	})
	bench := func(b *testing.B, cs *sdk.ClientSession) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: args}); err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	}
	sdkPipe := func() (sdk.Transport, sdk.Transport) { return sdk.NewInMemoryTransports() }
	inProcess := func() (sdk.Transport, sdk.Transport) { return NewInProcessTransports() }
	inMemory := func(b *testing.B, transports func() (sdk.Transport, sdk.Transport), run func(context.Context, sdk.Transport)) {
		ct, st := transports()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go run(ctx, st)
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		bench(b, cs)
	}
	trivial := func(b *testing.B, transports func() (sdk.Transport, sdk.Transport)) {
		srv := sdk.NewServer(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
		srv.AddTool(&sdk.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "kit 1 count 0"}}}, nil
			})
		inMemory(b, transports, func(ctx context.Context, t sdk.Transport) {
			if ss, err := srv.Connect(ctx, t, nil); err == nil {
				_ = ss.Wait()
			}
		})
	}
	b.Run("sdk=trivial-tool", func(b *testing.B) { trivial(b, sdkPipe) })
	b.Run("sdk=trivial-tool-in-process", func(b *testing.B) { trivial(b, inProcess) })
	ours := func(b *testing.B, transports func() (sdk.Transport, sdk.Transport)) {
		srv := NewServer((&factory{}).make, nil)
		defer srv.Close()
		inMemory(b, transports, func(ctx context.Context, t sdk.Transport) { _ = srv.Run(ctx, t) })
	}
	b.Run("mcp=in-memory", func(b *testing.B) { ours(b, inProcess) })
	b.Run("mcp=sdk-in-memory", func(b *testing.B) { ours(b, sdkPipe) })
	b.Run("mcp=lines", func(b *testing.B) {
		srv := NewServer((&factory{}).make, nil)
		defer srv.Close()
		client, server := net.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.Run(ctx, &LineTransport{In: server, Out: server})
		}()
		defer func() { cancel(); client.Close(); <-done }()
		replies := bufio.NewReader(client)
		roundTrip := func(line string, reply bool) {
			if _, err := io.WriteString(client, line+"\n"); err != nil {
				b.Fatal(err)
			}
			if reply {
				if _, err := replies.ReadSlice('\n'); err != nil {
					b.Fatal(err)
				}
			}
		}
		roundTrip(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`, true)
		roundTrip(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, false)
		call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":` + string(raw) + `}}`
		b.ReportAllocs()
		for b.Loop() {
			roundTrip(call, true)
		}
	})
	b.Run("mcp=streamable-http", func(b *testing.B) {
		srv := NewServer((&factory{}).make, nil)
		defer srv.Close()
		hs := httptest.NewServer(srv.HTTPHandler(nil))
		defer hs.Close()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(),
			&sdk.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		bench(b, cs)
	})
}
