package agentloop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
)

// replayFragment is how many bytes of text each replayed delta carries, so a UI shows the
// replayed answer streaming in as it did live.
const replayFragment = 24

// ReplayClient returns a go-openai client that answers each chat completion request with
// the next model turn recorded in t, streamed the way the API streams, instead of calling
// any API: it opens no connection and needs no key. The tool calls of the recorded turns
// are run for real by the Agent using the client; only the model is replayed.
//
// A request after the last recorded turn is answered with a 400 error saying the transcript
// ran out, which ends the run with that error. The client is safe for concurrent use, but a
// replay is meant for one Run.
func ReplayClient(t *Transcript) *goopenai.Client {
	cfg := goopenai.DefaultConfig("replay")
	cfg.BaseURL = "http://replay.invalid/v1" // never dialled: the doer answers in memory
	cfg.HTTPClient = &replayDoer{turns: t.Turns()}
	return goopenai.NewClientWithConfig(cfg)
}

// replayDoer serves recorded turns as HTTP responses, in memory.
type replayDoer struct {
	mu    sync.Mutex
	turns []Record
	next  int
}

func (d *replayDoer) Do(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") {
		return replayError(req, http.StatusNotFound, fmt.Sprintf("replay: only chat completions are recorded, not %s %s", req.Method, req.URL.Path)), nil
	}
	var body struct {
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if req.Body != nil {
		raw, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return replayError(req, http.StatusBadRequest, "replay: request body is not JSON: "+err.Error()), nil
		}
	}
	d.mu.Lock()
	if d.next >= len(d.turns) {
		n := len(d.turns)
		d.mu.Unlock()
		return replayError(req, http.StatusBadRequest, fmt.Sprintf("replay: the transcript has no more model turns (it recorded %d); the replayed run went further than the recorded one", n)), nil
	}
	rec := d.turns[d.next]
	d.next++
	d.mu.Unlock()

	finish := goopenai.FinishReason(rec.FinishReason)
	if finish == "" {
		finish = goopenai.FinishReasonStop
		if len(rec.Message.ToolCalls) > 0 {
			finish = goopenai.FinishReasonToolCalls
		}
	}
	id := fmt.Sprintf("chatcmpl-replay-%d", rec.Step)
	if !body.Stream {
		resp := goopenai.ChatCompletionResponse{
			ID: id, Object: "chat.completion", Created: time.Now().Unix(),
			Choices: []goopenai.ChatCompletionChoice{{Message: *rec.Message, FinishReason: finish}},
		}
		if rec.Usage != nil {
			resp.Usage = goopenai.Usage{PromptTokens: rec.Usage.PromptTokens, CompletionTokens: rec.Usage.CompletionTokens, TotalTokens: rec.Usage.TotalTokens}
		}
		b, _ := json.Marshal(resp)
		return replayResponse(req, http.StatusOK, "application/json", b), nil
	}
	includeUsage := body.StreamOptions != nil && body.StreamOptions.IncludeUsage
	return replayResponse(req, http.StatusOK, "text/event-stream", streamTurn(id, rec, finish, includeUsage)), nil
}

// streamTurn spells a recorded turn as server-sent events, chunked as the API chunks.
func streamTurn(id string, rec Record, finish goopenai.FinishReason, includeUsage bool) []byte {
	var buf bytes.Buffer
	created := time.Now().Unix()
	send := func(choices []goopenai.ChatCompletionStreamChoice, usage *goopenai.Usage) {
		b, _ := json.Marshal(goopenai.ChatCompletionStreamResponse{
			ID: id, Object: "chat.completion.chunk", Created: created, Choices: choices, Usage: usage,
		})
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	delta := func(d goopenai.ChatCompletionStreamChoiceDelta) {
		send([]goopenai.ChatCompletionStreamChoice{{Delta: d}}, nil)
	}
	msg := rec.Message
	delta(goopenai.ChatCompletionStreamChoiceDelta{Role: goopenai.ChatMessageRoleAssistant})
	for _, part := range fragments(msg.Content) {
		delta(goopenai.ChatCompletionStreamChoiceDelta{Content: part})
	}
	for _, part := range fragments(msg.Refusal) {
		delta(goopenai.ChatCompletionStreamChoiceDelta{Refusal: part})
	}
	for i, c := range msg.ToolCalls {
		index := i
		delta(goopenai.ChatCompletionStreamChoiceDelta{ToolCalls: []goopenai.ToolCall{{
			Index: &index, ID: c.ID, Type: goopenai.ToolTypeFunction,
			Function: goopenai.FunctionCall{Name: c.Function.Name},
		}}})
		delta(goopenai.ChatCompletionStreamChoiceDelta{ToolCalls: []goopenai.ToolCall{{
			Index: &index, Function: goopenai.FunctionCall{Arguments: c.Function.Arguments},
		}}})
	}
	send([]goopenai.ChatCompletionStreamChoice{{FinishReason: finish}}, nil)
	if includeUsage && rec.Usage != nil {
		send([]goopenai.ChatCompletionStreamChoice{}, &goopenai.Usage{
			PromptTokens: rec.Usage.PromptTokens, CompletionTokens: rec.Usage.CompletionTokens, TotalTokens: rec.Usage.TotalTokens,
		})
	}
	buf.WriteString("data: [DONE]\n\n")
	return buf.Bytes()
}

// fragments cuts s into pieces of about replayFragment bytes, never inside a character.
func fragments(s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(replayFragment, len(s))
		for n < len(s) && !utf8Start(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func replayResponse(req *http.Request, status int, contentType string, body []byte) *http.Response {
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {contentType}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func replayError(req *http.Request, status int, message string) *http.Response {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": "invalid_request_error"}})
	return replayResponse(req, status, "application/json", b)
}
