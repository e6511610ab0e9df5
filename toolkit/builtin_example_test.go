package toolkit_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

type greetIn struct {
	Name string `json:"name"`
}

func ExampleForSandbox() {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierProcess))
	if err != nil {
		panic(err)
	}
	defer sb.Close()
	// Offer only reading tools, plus one of our own.
	kit, err := toolkit.ForSandbox(sb).Subset("read_file", "list_files", "search_files")
	if err != nil {
		panic(err)
	}
	greet := toolkit.New("greet", "Greet someone.", func(ctx context.Context, in greetIn) (string, error) {
		return "hello " + in.Name, nil
	})
	if err := kit.Add(greet); err != nil {
		panic(err)
	}
	_ = sb.Files.Write(ctx, "notes.txt", []byte("buy milk\n"), 0)
	res, _ := kit.Call(ctx, "read_file", json.RawMessage(`{"path":"notes.txt"}`))
	fmt.Println(res.Text)
	res, _ = kit.Call(ctx, "greet", json.RawMessage(`{"name":"Ada"}`))
	fmt.Println(res.Text)
	// Output:
	// 1	buy milk
	// hello Ada
}
