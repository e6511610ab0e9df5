package toolkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

type shoutIn struct {
	Text string `json:"text" description:"what to shout"`
}

type shoutOut struct {
	Shouted string `json:"shouted"`
}

func (o shoutOut) ToolText() string { return o.Shouted }

func ExampleNew() {
	shout := toolkit.New("shout", "Upper-case some text.",
		func(ctx context.Context, in shoutIn) (shoutOut, error) {
			return shoutOut{Shouted: strings.ToUpper(in.Text)}, nil
		}, toolkit.ReadOnly())
	kit := toolkit.Of(shout)

	res, _ := kit.Call(context.Background(), "shout", json.RawMessage(`{"text":"hi"}`))
	fmt.Println(res.Text, string(res.Data), res.IsError)

	res, _ = kit.Call(context.Background(), "shout", json.RawMessage(`{"txt":"hi"}`))
	fmt.Println(res.Text, res.IsError)
	// Output:
	// HI {"shouted":"HI"} false
	// invalid arguments for shout: missing required argument "text" (string); unknown argument "txt" (did you mean "text"? allowed: text) true
}

func ExampleRender() {
	stdout, omitted := toolkit.Truncate("line 1\nline 2\nline 3\n", 14)
	fmt.Println(toolkit.Render(
		[]toolkit.Field{{Name: "exit code", Value: "0"}},
		toolkit.Section{Name: "stdout", Body: stdout, Omitted: omitted, FullPath: "/workspace/.out/1.txt"},
		toolkit.Section{Name: "stderr"},
	))
	// Output:
	// exit code: 0
	// --- stdout ---
	// line 1
	// line 2
	// [truncated: 7 more bytes not shown; full output in /workspace/.out/1.txt]
}
