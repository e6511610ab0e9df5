package mcp_test

import (
	"context"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/adapters/mcp"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// A go-sdk client and a Server in one process, connected without JSON
// between them. A real factory would create a sandbox and return
// toolkit.ForSandbox(sb) and sb.Close.
func ExampleNewInProcessTransports() {
	type greetIn struct {
		Name string `json:"name" description:"who to greet"`
	}
	factory := func(context.Context) (*toolkit.Toolkit, func(), error) {
		return toolkit.Of(toolkit.New("greet", "Greet someone.", func(_ context.Context, in greetIn) (string, error) {
			return "hello, " + in.Name, nil
		})), func() {}, nil
	}
	srv := mcp.NewServer(factory, nil)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clientEnd, serverEnd := mcp.NewInProcessTransports()
	go srv.Run(ctx, serverEnd) // returns when the client closes its session
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "my-agent", Version: "1"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "world"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Content[0].(*sdk.TextContent).Text)
	// Output: hello, world
}
