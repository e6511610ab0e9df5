package openaitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// The out* types are the response wire format, written out field by field so that what the
// server sends matches the real API, including its nulls and omissions.
type outToolCall struct {
	Index    *int        `json:"index,omitempty"`
	ID       string      `json:"id,omitempty"`
	Type     string      `json:"type,omitempty"`
	Function outFunction `json:"function"`
}

type outFunction struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type outMessage struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"`
	Refusal   *string       `json:"refusal"`
	ToolCalls []outToolCall `json:"tool_calls,omitempty"`
}

type outDelta struct {
	Role      string        `json:"role,omitempty"`
	Content   *string       `json:"content,omitempty"`
	Refusal   *string       `json:"refusal,omitempty"`
	ToolCalls []outToolCall `json:"tool_calls,omitempty"`
}

type outChoice struct {
	Index        int         `json:"index"`
	Message      *outMessage `json:"message,omitempty"`
	Delta        *outDelta   `json:"delta,omitempty"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason *string     `json:"finish_reason"`
}

type outCompletion struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []outChoice `json:"choices"`
	// Usage is a pointer to a pointer so a chunk can say "usage": null (streams with
	// include_usage) or leave the field out (streams without it).
	Usage **Usage `json:"usage,omitempty"`
}

// answer is one reply rendered for one request.
type answer struct {
	id      string
	model   string
	created int64
	reply   Reply
	calls   []ToolCall // the reply's calls with ids and arguments filled in
	finish  string
	usage   Usage
}

func newAnswer(rec *Request, wire *wireRequest, r Reply) *answer {
	a := &answer{
		id:      fmt.Sprintf("chatcmpl-openaitest-%d", rec.Step+1),
		model:   wire.Model,
		created: time.Now().Unix(),
		reply:   r,
		finish:  r.FinishReason,
	}
	for i, c := range r.ToolCalls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d_%d", rec.Step+1, i)
		}
		if c.Arguments == "" {
			c.Arguments = "{}"
		}
		a.calls = append(a.calls, c)
	}
	if a.finish == "" {
		a.finish = "stop"
		if len(a.calls) > 0 {
			a.finish = "tool_calls"
		}
	}
	if r.Usage != nil {
		a.usage = *r.Usage
	} else {
		out := len(r.Text) + len(r.Refusal)
		for _, c := range a.calls {
			out += len(c.Name) + len(c.Arguments)
		}
		a.usage = Usage{PromptTokens: (len(rec.Body) + 3) / 4, CompletionTokens: (out + 3) / 4}
	}
	if a.usage.TotalTokens == 0 {
		a.usage.TotalTokens = a.usage.PromptTokens + a.usage.CompletionTokens
	}
	return a
}

// whole writes a non-streamed chat.completion object.
func (a *answer) whole(w http.ResponseWriter) {
	msg := &outMessage{Role: "assistant"}
	if a.reply.Text != "" || (a.reply.Refusal == "" && len(a.calls) == 0) {
		msg.Content = &a.reply.Text
	}
	if a.reply.Refusal != "" {
		msg.Refusal = &a.reply.Refusal
	}
	for _, c := range a.calls {
		msg.ToolCalls = append(msg.ToolCalls, outToolCall{
			ID: c.ID, Type: "function", Function: outFunction{Name: c.Name, Arguments: &c.Arguments},
		})
	}
	usage := &a.usage
	body := outCompletion{
		ID: a.id, Object: "chat.completion", Created: a.created, Model: a.model,
		Choices: []outChoice{{Message: msg, FinishReason: &a.finish}},
		Usage:   &usage,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// deltas lists the streamed deltas of the answer in wire order, the last one carrying the
// finish reason.
func (a *answer) deltas() []outChoice {
	size := a.reply.FragmentSize
	if size <= 0 {
		size = 8
	}
	empty := ""
	out := []outChoice{{Delta: &outDelta{Role: "assistant", Content: &empty}}}
	for _, f := range fragments(a.reply.Text, size) {
		out = append(out, outChoice{Delta: &outDelta{Content: &f}})
	}
	for _, f := range fragments(a.reply.Refusal, size) {
		out = append(out, outChoice{Delta: &outDelta{Refusal: &f}})
	}

	// Per call: its first delta (index, id, type, name, empty arguments), then its
	// argument fragments (index and fragment only).
	perCall := make([][]outToolCall, len(a.calls))
	for i, c := range a.calls {
		idx := i
		perCall[i] = append(perCall[i], outToolCall{
			Index: &idx, ID: c.ID, Type: "function", Function: outFunction{Name: c.Name, Arguments: &empty},
		})
		for _, f := range fragments(c.Arguments, size) {
			perCall[i] = append(perCall[i], outToolCall{Index: &idx, Function: outFunction{Arguments: &f}})
		}
	}
	emit := func(tc outToolCall) {
		out = append(out, outChoice{Delta: &outDelta{ToolCalls: []outToolCall{tc}}})
	}
	if a.reply.Sequential {
		for _, deltas := range perCall {
			for _, d := range deltas {
				emit(d)
			}
		}
	} else {
		for k := 0; ; k++ {
			more := false
			for _, deltas := range perCall {
				if k < len(deltas) {
					emit(deltas[k])
					more = true
				}
			}
			if !more {
				break
			}
		}
	}
	out = append(out, outChoice{Delta: &outDelta{}, FinishReason: &a.finish})
	return out
}

// stream writes the answer as server-sent events.
func (a *answer) stream(w http.ResponseWriter, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)

	var nullUsage **Usage
	if includeUsage {
		var none *Usage
		nullUsage = &none
	}
	chunks := []outCompletion{}
	for _, d := range a.deltas() {
		chunks = append(chunks, outCompletion{
			ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model,
			Choices: []outChoice{d}, Usage: nullUsage,
		})
	}
	if includeUsage {
		usage := &a.usage
		chunks = append(chunks, outCompletion{
			ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model,
			Choices: []outChoice{}, Usage: &usage,
		})
	}
	for i, c := range chunks {
		if a.reply.DropAfter > 0 && i == a.reply.DropAfter {
			if flusher != nil {
				flusher.Flush()
			}
			// Aborting the handler makes net/http close the connection without ending the
			// chunked body, so the client sees a truncated stream, not a clean end.
			panic(http.ErrAbortHandler)
		}
		if a.reply.ErrorAfter > 0 && i == a.reply.ErrorAfter {
			e := a.reply.Error
			if e == nil {
				e = &APIError{Message: "openaitest: scripted server error in the middle of the stream", Type: "server_error"}
			}
			b, _ := json.Marshal(map[string]*APIError{"error": e})
			fmt.Fprintf(w, "data: %s\n\n", b)
			return
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// fragments cuts s into pieces of about size bytes without splitting a UTF-8 character.
func fragments(s string, size int) []string {
	var out []string
	for len(s) > 0 {
		n := size
		if n >= len(s) {
			n = len(s)
		} else {
			for n > 0 && !utf8.RuneStart(s[n]) {
				n--
			}
			if n == 0 { // a single character longer than size
				_, n = utf8.DecodeRuneInString(s)
			}
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
