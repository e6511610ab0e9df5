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
	head, tail, omitted, lines := toolkit.TruncateMiddle("line 1\nline 2\nline 3\nline 4\nline 5\n", 21)
	fmt.Println(toolkit.Render(
		[]toolkit.Field{{Name: "exit code", Value: "0"}},
		toolkit.Section{Name: "stdout", Body: head, Tail: tail, Omitted: omitted, OmittedLines: lines, FullPath: "/workspace/.out/1.txt"},
		toolkit.Section{Name: "stderr"},
	))
	// Output:
	// exit code: 0
	// --- stdout ---
	// line 1
	// [… 2 lines (14 bytes) omitted; the whole output is in /workspace/.out/1.txt: read_file with offset, or search_files …]
	// line 4
	// line 5
}
