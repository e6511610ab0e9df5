package openaitools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// Option adjusts [Dispatch].
type Option func(*dispatchOptions)

type dispatchOptions struct {
	maxParallel int
	independent bool
	detail      goopenai.ImageURLDetail
}

// MaxParallel bounds how many calls run at once (default 4). n < 1 means 1: every call in
// turn.
func MaxParallel(n int) Option {
	return func(o *dispatchOptions) { o.maxParallel = max(n, 1) }
}

// AssumeIndependent runs all calls of a batch concurrently (within MaxParallel), not only the
// read-only ones: for toolkits whose tools never depend on each other's effects.
func AssumeIndependent() Option {
	return func(o *dispatchOptions) { o.independent = true }
}

// ImageDetail sets the detail level requested for images sent to the model (default: the
// API's own default, auto). Low detail costs far fewer tokens.
func ImageDetail(d goopenai.ImageURLDetail) Option {
	return func(o *dispatchOptions) { o.detail = d }
}

// Dispatch runs the tool calls of one assistant message and returns the messages that answer
// them: one role-tool message per call, with ToolCallID set, in the order of calls, followed
// — only when results carry images — by one user message holding the images (see the package
// doc). Append all of them to the conversation.
//
// A call the model got wrong (unknown tool, bad arguments) or that failed inside the tool is
// answered with a tool message explaining the failure, so the model can correct itself. The
// error is non-nil, and no messages are returned, when the calls are unusable (a call without
// an id, a repeated id, a type other than function) or when a call hit an infrastructure
// failure (a dead sandbox, ctx done); the calls still running are then cancelled.
func Dispatch(ctx context.Context, tk *toolkit.Toolkit, calls []goopenai.ToolCall, opts ...Option) ([]goopenai.ChatCompletionMessage, error) {
	o := dispatchOptions{maxParallel: 4}
	for _, opt := range opts {
		opt(&o)
	}
	seen := make(map[string]bool, len(calls))
	for i, c := range calls {
		switch {
		case c.ID == "":
			return nil, fmt.Errorf("openaitools: tool call %d (%s) has no id; pass the calls of a complete message (see Accumulator for streams)", i, c.Function.Name)
		case seen[c.ID]:
			return nil, fmt.Errorf("openaitools: tool call id %q appears twice", c.ID)
		case c.Type != "" && c.Type != goopenai.ToolTypeFunction:
			return nil, fmt.Errorf("openaitools: tool call %s has type %q; only function calls can be dispatched", c.ID, c.Type)
		}
		seen[c.ID] = true
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]toolkit.Result, len(calls))
	errs := make([]error, len(calls))
	ran := make([]bool, len(calls))
	run := func(i int) {
		c := calls[i]
		ran[i] = true
		res, err := tk.Call(ctx, c.Function.Name, json.RawMessage(c.Function.Arguments))
		results[i] = res
		if err != nil {
			errs[i] = fmt.Errorf("openaitools: tool call %s (%s): %w", c.ID, c.Function.Name, err)
			cancel(errs[i])
		}
	}

	sem := make(chan struct{}, o.maxParallel)
	var wg sync.WaitGroup
	for i := 0; i < len(calls); {
		// A group is a run of calls that may overlap: read-only calls next to each other, or
		// one call alone. Groups run one after another.
		end := i + 1
		if o.independent || readOnly(tk, calls[i]) {
			for end < len(calls) && (o.independent || readOnly(tk, calls[end])) {
				end++
			}
		}
		if end == i+1 {
			run(i) // nothing to overlap with: spare the goroutine
		} else {
			for j := i; j < end && ctx.Err() == nil; j++ {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					run(j)
				}()
			}
			wg.Wait()
		}
		if ctx.Err() != nil {
			break
		}
		i = end
	}
	// The first failure cancelled the calls running beside it; report it, not their
	// cancellations.
	cause := context.Cause(ctx)
	var first error
	for _, err := range errs {
		if err != nil && err == cause {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	for i, ok := range ran {
		if !ok {
			return nil, fmt.Errorf("openaitools: tool call %s (%s) not run: %w", calls[i].ID, calls[i].Function.Name, context.Cause(ctx))
		}
	}
	return messages(calls, results, o.detail), nil
}

// readOnly reports whether a call can overlap with its read-only neighbours. A call to an
// unknown tool only produces an error result, so it cannot disturb anything.
func readOnly(tk *toolkit.Toolkit, c goopenai.ToolCall) bool {
	t, ok := tk.Lookup(c.Function.Name)
	return !ok || t.Annotations().ReadOnly
}

// messages turns results into the tool messages, plus the user message carrying images.
func messages(calls []goopenai.ToolCall, results []toolkit.Result, detail goopenai.ImageURLDetail) []goopenai.ChatCompletionMessage {
	out := make([]goopenai.ChatCompletionMessage, 0, len(calls)+1)
	var images []goopenai.ChatMessagePart
	for i, c := range calls {
		text := results[i].Text
		if text == "" {
			// The API refuses a tool message without content, and an empty one reads as
			// "nothing happened" to the model anyway.
			text = "(no output)"
		}
		if n := len(results[i].Images); n > 0 {
			text += fmt.Sprintf("\n[%d image(s) from this call follow in the next user message]", n)
			images = append(images, goopenai.ChatMessagePart{
				Type: goopenai.ChatMessagePartTypeText,
				Text: fmt.Sprintf("Images from tool call %s (%s):", c.ID, c.Function.Name),
			})
			for _, img := range results[i].Images {
				images = append(images, goopenai.ChatMessagePart{
					Type:     goopenai.ChatMessagePartTypeImageURL,
					ImageURL: &goopenai.ChatMessageImageURL{URL: DataURL(img), Detail: detail},
				})
			}
		}
		out = append(out, goopenai.ChatCompletionMessage{
			Role:       goopenai.ChatMessageRoleTool,
			ToolCallID: c.ID,
			Content:    text,
		})
	}
	if len(images) > 0 {
		out = append(out, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, MultiContent: images})
	}
	return out
}

// DataURL encodes an image as a data: URL, the form in which the API accepts inline images.
func DataURL(img toolkit.Image) string {
	mime := img.MIMEType
	if mime == "" {
		mime = "application/octet-stream"
	}
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}
