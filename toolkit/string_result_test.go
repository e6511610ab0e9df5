package toolkit_test

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

type label string

// TestStringResultIsTheText: a tool whose function returns a string used to give the model
// that string JSON-quoted ("\"line one\\nline \\\"two\\\"\""); the model reads the text itself.
func TestStringResultIsTheText(t *testing.T) {
	const text = "line one\nline \"two\" <b>"
	for _, tool := range []*toolkit.Tool{
		toolkit.New("say", "Says it.", func(ctx context.Context, in struct{}) (string, error) { return text, nil }),
		toolkit.New("label", "Labels it.", func(ctx context.Context, in struct{}) (label, error) { return label(text), nil }),
	} {
		res, err := toolkit.Of(tool).Call(context.Background(), tool.Name(), []byte(`{}`))
		if err != nil || res.IsError {
			t.Fatalf("%s: %+v, %v", tool.Name(), res, err)
		}
		if res.Text != text {
			t.Errorf("%s: the model reads %q, want %q", tool.Name(), res.Text, text)
		}
		// Structured clients (MCP's structuredContent) still get JSON.
		if string(res.Data) != `"line one\nline \"two\" <b>"` {
			t.Errorf("%s: Data = %s, want the JSON string", tool.Name(), res.Data)
		}
	}
}
