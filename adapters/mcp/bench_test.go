package mcp

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCall measures what MCP adds to a tool call, against the floor
// of calling the same toolkit directly in the same run: the in-memory
// transport shows the protocol's own cost (JSON-RPC, the SDK, this
// adapter), HTTP adds a loopback streamable HTTP round trip.
//
//	go test -run '^$' -bench Call ./adapters/mcp
func BenchmarkCall(b *testing.B) {
	args := map[string]any{"text": "hello"}
	raw, _ := json.Marshal(args)
	f := &factory{}
	kit, release, _ := f.make(context.Background())
	defer release()
	b.Run("floor=toolkit.Call", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			if res, err := kit.Call(ctx, "echo", raw); err != nil || res.IsError {
				b.Fatal(err, res.Text)
			}
		}
	})
	bench := func(b *testing.B, cs *sdk.ClientSession) {
		ctx := context.Background()
		for b.Loop() {
			if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: args}); err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	}
	b.Run("mcp=in-memory", func(b *testing.B) {
		srv := NewServer((&factory{}).make, nil)
		defer srv.Close()
		ct, st := sdk.NewInMemoryTransports()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go srv.Run(ctx, st)
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		bench(b, cs)
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
