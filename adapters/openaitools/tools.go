package openaitools

import (
	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// Tools declares every tool of tk for ChatCompletionRequest.Tools, in registration order.
// A tool whose schema has a strict form is sent with strict mode on and that form; the others
// (a map or any argument) are sent with their plain schema and strict off, since strict mode
// would refuse them.
func Tools(tk *toolkit.Toolkit) []goopenai.Tool {
	all := tk.Tools()
	out := make([]goopenai.Tool, 0, len(all))
	for _, t := range all {
		def := &goopenai.FunctionDefinition{
			Name:        t.Name(),
			Description: t.Description(),
			Parameters:  t.Schema(),
		}
		if strict, ok := t.StrictSchema(); ok {
			def.Parameters, def.Strict = strict, true
		}
		out = append(out, goopenai.Tool{Type: goopenai.ToolTypeFunction, Function: def})
	}
	return out
}
