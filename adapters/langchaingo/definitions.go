package langchaingo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/tmc/langchaingo/llms"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// DefinitionOption adjusts [Definitions].
type DefinitionOption func(*definitionOptions)

type definitionOptions struct{ plain bool }

// NotStrict declares every tool with its plain schema and Strict off. Use it with providers
// that do not understand OpenAI's strict form (optional fields as nullable types, every field
// listed as required); OpenAI models want the default.
func NotStrict() DefinitionOption {
	return func(o *definitionOptions) { o.plain = true }
}

// Definitions declares every tool of tk for llms.WithTools, in registration order, with the
// tool's real argument schema. As with package openaitools, a tool whose schema has an OpenAI
// strict-mode form is declared with that form and Strict set (the model then cannot send
// arguments that miss or add a field); the others (a map or any argument) with their plain
// schema and Strict off. [NotStrict] turns strict mode off for all. Parameters is a
// map[string]any, the form every langchaingo provider accepts (some, like googleai, accept
// nothing else).
func Definitions(tk *toolkit.Toolkit, opts ...DefinitionOption) []llms.Tool {
	var o definitionOptions
	for _, opt := range opts {
		opt(&o)
	}
	all := tk.Tools()
	out := make([]llms.Tool, 0, len(all))
	for _, t := range all {
		raw, strict := t.Schema(), false
		if !o.plain {
			if s, ok := t.StrictSchema(); ok {
				raw, strict = s, true
			}
		}
		var params map[string]any
		if err := json.Unmarshal(raw, &params); err != nil {
			// toolkit only builds tools whose schema is an object; reaching this is a bug there.
			panic(fmt.Sprintf("langchaingo: schema of tool %s is not a JSON object: %v", t.Name(), err))
		}
		out = append(out, llms.Tool{
			Type: "function",
			Function: &llms.FunctionDefinition{
				Name:        t.Name(),
				Description: t.Description(),
				Parameters:  params,
				Strict:      strict,
			},
		})
	}
	return out
}

// AssistantMessage turns a response choice into the AI message to append to the
// conversation before the results of its tool calls: its text (if any) and one ToolCall part
// per call, as the providers expect to see it again.
func AssistantMessage(choice *llms.ContentChoice) llms.MessageContent {
	msg := llms.MessageContent{Role: llms.ChatMessageTypeAI}
	if choice.Content != "" {
		msg.Parts = append(msg.Parts, llms.TextContent{Text: choice.Content})
	}
	for _, c := range choice.ToolCalls {
		msg.Parts = append(msg.Parts, c)
	}
	return msg
}

// Dispatch runs the tool calls of one response, in order, and returns the messages answering
// them: one role-tool message per call with a single ToolCallResponse part (ToolCallID, the
// tool's name, the result text), followed — only when results carry images — by one human
// message holding them as data: URLs. Append all of them, in order.
//
// A call the model got wrong or that failed inside the tool is answered with a message
// explaining the failure. The error is non-nil, and no messages are returned, for a call
// without an id or function, or when a call hit an infrastructure failure (a dead sandbox,
// ctx done); the remaining calls are then not run.
func Dispatch(ctx context.Context, tk *toolkit.Toolkit, calls []llms.ToolCall) ([]llms.MessageContent, error) {
	for i, c := range calls {
		if c.ID == "" || c.FunctionCall == nil {
			return nil, fmt.Errorf("langchaingo: tool call %d has no id or no function", i)
		}
	}
	out := make([]llms.MessageContent, 0, len(calls)+1)
	var images []llms.ContentPart
	for _, c := range calls {
		name := c.FunctionCall.Name
		res, err := tk.Call(ctx, name, json.RawMessage(c.FunctionCall.Arguments))
		if err != nil {
			return nil, fmt.Errorf("langchaingo: tool call %s (%s): %w", c.ID, name, err)
		}
		text := res.Text
		if text == "" {
			text = "(no output)" // an empty tool message reads as a lost result
		}
		if n := len(res.Images); n > 0 {
			text += fmt.Sprintf("\n[%d image(s) from this call follow in the next user message]", n)
			images = append(images, llms.TextContent{Text: fmt.Sprintf("Images from tool call %s (%s):", c.ID, name)})
			for _, img := range res.Images {
				images = append(images, llms.ImageURLContent{URL: dataURL(img)})
			}
		}
		out = append(out, llms.MessageContent{
			Role:  llms.ChatMessageTypeTool,
			Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: c.ID, Name: name, Content: text}},
		})
	}
	if len(images) > 0 {
		out = append(out, llms.MessageContent{Role: llms.ChatMessageTypeHuman, Parts: images})
	}
	return out, nil
}

// dataURL encodes an image inline. langchaingo's OpenAI provider sends an ImageURLContent as
// an image_url part, which accepts data: URLs; its BinaryContent form is not one the OpenAI
// API understands.
func dataURL(img toolkit.Image) string {
	mime := img.MIMEType
	if mime == "" {
		mime = "application/octet-stream"
	}
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}
