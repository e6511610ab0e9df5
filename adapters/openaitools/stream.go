package openaitools

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	goopenai "github.com/sashabaranov/go-openai"
)

// ErrIncompleteStream is wrapped by the error [Accumulator.ReadAll] returns when a stream
// ended cleanly but before any finish reason: what was received may be half a tool call.
var ErrIncompleteStream = errors.New("openaitools: stream ended before its finish reason")

// Accumulator rebuilds one assistant message from the chunks of a streamed chat completion
// (a request with n = 1). Feed it every chunk with [Accumulator.Add], or a whole stream with
// [Accumulator.ReadAll]; then [Accumulator.Message] is the message to append to the
// conversation and its ToolCalls are ready for [Dispatch]. The zero value is ready to use.
// An Accumulator is not safe for concurrent use.
type Accumulator struct {
	text, refusal strings.Builder
	calls         map[int]*partialCall
	last          int // index of the call the most recent delta was for
	finish        goopenai.FinishReason
	usage         *goopenai.Usage
	chunks        int
}

// partialCall is a tool call being assembled; arguments grow by fragments, so they go into a
// builder rather than a string rebuilt on every delta.
type partialCall struct {
	id, typ, name string
	args          strings.Builder
}

// Add merges one chunk. Tool call deltas are joined by their index, so fragments of
// parallel calls may arrive in any interleaving. For servers that omit the index, a delta
// with a new id starts the next call and one without continues the latest. Add returns an
// error, and changes nothing, for a chunk it cannot place: a choice other than 0, a fragment
// for a call whose first delta (with the id) never came, or a call whose id changes.
func (a *Accumulator) Add(chunk goopenai.ChatCompletionStreamResponse) error {
	// First place every delta without changing anything, so a bad one leaves the
	// accumulator as it was; then apply.
	var (
		targets []int
		started map[int]string // calls this chunk starts: index -> id
		last    = a.last
	)
	for _, ch := range chunk.Choices {
		if ch.Index != 0 {
			return fmt.Errorf("openaitools: stream chunk for choice %d; Accumulator handles single-choice streams (n = 1)", ch.Index)
		}
		for _, d := range ch.Delta.ToolCalls {
			id := func(i int) (string, bool) {
				if c, ok := a.calls[i]; ok {
					return c.id, true
				}
				v, ok := started[i]
				return v, ok
			}
			idx := last
			switch {
			case d.Index != nil:
				idx = *d.Index
			case d.ID != "":
				if cur, ok := id(last); !ok || cur != d.ID {
					idx = len(a.calls) + len(started)
				}
			}
			cur, exists := id(idx)
			switch {
			case !exists && d.ID == "":
				return fmt.Errorf("openaitools: fragment for tool call %d arrived before its first delta (the one with id and name)", idx)
			case !exists:
				if started == nil {
					started = map[int]string{}
				}
				started[idx] = d.ID
			case d.ID != "" && d.ID != cur:
				return fmt.Errorf("openaitools: tool call %d changed id from %q to %q mid-stream", idx, cur, d.ID)
			}
			targets = append(targets, idx)
			last = idx
		}
	}

	a.chunks++
	a.last = last
	if chunk.Usage != nil {
		u := *chunk.Usage
		a.usage = &u
	}
	k := 0
	for _, ch := range chunk.Choices {
		a.text.WriteString(ch.Delta.Content)
		a.refusal.WriteString(ch.Delta.Refusal)
		for _, d := range ch.Delta.ToolCalls {
			a.merge(targets[k], d)
			k++
		}
		if ch.FinishReason != "" && ch.FinishReason != goopenai.FinishReasonNull {
			a.finish = ch.FinishReason
		}
	}
	return nil
}

// merge adds one placed tool call delta.
func (a *Accumulator) merge(idx int, d goopenai.ToolCall) {
	if a.calls == nil {
		a.calls = map[int]*partialCall{}
	}
	c := a.calls[idx]
	if c == nil {
		c = &partialCall{id: d.ID}
		a.calls[idx] = c
	}
	if c.typ == "" {
		c.typ = string(d.Type)
	}
	// A name normally comes whole in the first delta; some servers repeat it in every
	// delta, and a few split it, so only a different name is appended.
	if d.Function.Name != "" && d.Function.Name != c.name {
		c.name += d.Function.Name
	}
	c.args.WriteString(d.Function.Arguments)
}

// ReadAll feeds the rest of stream to the accumulator until the server's "[DONE]" (or the
// end of the body). It returns nil when the stream ended properly; an error from the stream
// (an error event, a connection cut mid-stream) or from Add; or an error wrapping
// [ErrIncompleteStream] when the body ended before any finish reason. What arrived before an
// error stays in the accumulator. ReadAll does not close the stream.
func (a *Accumulator) ReadAll(stream *goopenai.ChatCompletionStream) error {
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if a.finish == "" {
				return fmt.Errorf("%w (after %d chunks)", ErrIncompleteStream, a.chunks)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("openaitools: reading stream after %d chunks: %w", a.chunks, err)
		}
		if err := a.Add(chunk); err != nil {
			return err
		}
	}
}

// Text returns the message content received so far.
func (a *Accumulator) Text() string { return a.text.String() }

// Refusal returns the refusal text received so far; non-empty means the model declined.
func (a *Accumulator) Refusal() string { return a.refusal.String() }

// ToolCalls returns the tool calls received so far, ordered by their stream index, with
// Index cleared and Type set, as they must be sent back in the assistant message.
func (a *Accumulator) ToolCalls() []goopenai.ToolCall {
	if len(a.calls) == 0 {
		return nil
	}
	idx := make([]int, 0, len(a.calls))
	for i := range a.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]goopenai.ToolCall, 0, len(idx))
	for _, i := range idx {
		c := a.calls[i]
		typ := goopenai.ToolType(c.typ)
		if typ == "" {
			typ = goopenai.ToolTypeFunction
		}
		out = append(out, goopenai.ToolCall{
			ID: c.id, Type: typ,
			Function: goopenai.FunctionCall{Name: c.name, Arguments: c.args.String()},
		})
	}
	return out
}

// Message returns the assistant message the chunks spell out.
func (a *Accumulator) Message() goopenai.ChatCompletionMessage {
	return goopenai.ChatCompletionMessage{
		Role:      goopenai.ChatMessageRoleAssistant,
		Content:   a.Text(),
		Refusal:   a.Refusal(),
		ToolCalls: a.ToolCalls(),
	}
}

// FinishReason returns the finish reason, empty until the chunk carrying it arrived.
func (a *Accumulator) FinishReason() goopenai.FinishReason { return a.finish }

// Usage returns the token usage sent in the last chunk when the request set
// stream_options.include_usage, or nil.
func (a *Accumulator) Usage() *goopenai.Usage { return a.usage }
