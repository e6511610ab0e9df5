package openaitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
)

// APIKey is the key [Server.Client] sends. The server accepts any non-empty bearer token.
const APIKey = "sk-openaitest"

// Server is a scripted chat completions endpoint on 127.0.0.1. Create it with [New].
type Server struct {
	// URL is the API base URL, ending in /v1: what go-openai's ClientConfig.BaseURL,
	// langchaingo's openai.WithBaseURL or OPENAI_BASE_URL expect.
	URL string

	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	script    []Step
	next      int // index of the next step to answer with
	requests  []*Request
	exhausted int // requests that arrived after the script ran out
}

// Request is one recorded request.
type Request struct {
	// Header holds the request headers (Authorization included).
	Header http.Header
	// Body is the raw JSON the client sent.
	Body []byte
	// Chat is Body decoded as a go-openai request, for convenient inspection. It is the zero
	// value when Body is not valid JSON.
	Chat goopenai.ChatCompletionRequest
	// Rejection is the error the server answered with when the request broke a rule of the
	// real API; nil when the request reached the script.
	Rejection *APIError
	// Step is the index (from 0) of the script step that answered, or -1 when the request
	// was rejected or came after the script ran out.
	Step int
}

// ToolResults maps each tool_call_id answered by a tool message in the request to the text
// content of that message.
func (r *Request) ToolResults() map[string]string {
	out := map[string]string{}
	for _, m := range r.Chat.Messages {
		if m.Role == goopenai.ChatMessageRoleTool {
			out[m.ToolCallID] = messageText(m)
		}
	}
	return out
}

// LastMessage returns the request's final message (the zero message when there is none).
func (r *Request) LastMessage() goopenai.ChatCompletionMessage {
	if len(r.Chat.Messages) == 0 {
		return goopenai.ChatCompletionMessage{}
	}
	return r.Chat.Messages[len(r.Chat.Messages)-1]
}

// messageText joins a message's text, whether it was sent as a string or as parts.
func messageText(m goopenai.ChatCompletionMessage) string {
	if m.Content != "" || len(m.MultiContent) == 0 {
		return m.Content
	}
	var b strings.Builder
	for _, p := range m.MultiContent {
		if p.Type == goopenai.ChatMessagePartTypeText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// New starts a server that answers with script, one step per request, and closes it when
// the test ends. The test fails then if steps were left unrequested or requests came after
// the script ran out (those are answered with a 500).
func New(t testing.TB, script ...Step) *Server {
	t.Helper()
	s := &Server{t: t, script: script}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(func() {
		s.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		if left := len(s.script) - s.next; left > 0 {
			t.Errorf("openaitest: %d of %d script steps were never requested", left, len(s.script))
		}
		if s.exhausted > 0 {
			t.Errorf("openaitest: %d request(s) arrived after the script (%d steps) ran out", s.exhausted, len(s.script))
		}
	})
	return s
}

// Add appends steps to the script, for tests that decide the next turns as they go.
func (s *Server) Add(steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, steps...)
}

// Requests returns every request received so far, in arrival order, rejected ones included.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// Pending returns how many script steps have not been requested yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script) - s.next
}

// Client returns a go-openai client that talks to this server.
func (s *Server) Client() *goopenai.Client {
	cfg := goopenai.DefaultConfig(APIKey)
	cfg.BaseURL = s.URL
	cfg.HTTPClient = s.srv.Client()
	return goopenai.NewClientWithConfig(cfg)
}

// Close shuts the server down, waiting for requests in flight. New arranges it at the end of
// the test; calling it earlier is allowed (to test a vanished endpoint).
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		writeError(w, http.StatusNotFound, invalid("", "unknown_url", "Invalid URL (%s %s)", r.Method, r.URL.Path), nil)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, invalid("", "method_not_supported", "Invalid method for URL (%s %s)", r.Method, r.URL.Path), nil)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-request; nobody is left to answer
	}
	rec := &Request{Header: r.Header.Clone(), Body: body, Step: -1}
	_ = json.Unmarshal(body, &rec.Chat) // best effort: validate reports bad JSON precisely

	status := http.StatusBadRequest
	var wire *wireRequest
	if key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "); strings.TrimSpace(key) == "" || key == r.Header.Get("Authorization") {
		status = http.StatusUnauthorized
		rec.Rejection = invalid("", "invalid_api_key", "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	} else {
		wire, rec.Rejection = validate(body)
	}

	s.mu.Lock()
	s.requests = append(s.requests, rec)
	n := len(s.requests)
	var step Step
	if rec.Rejection == nil {
		if s.next < len(s.script) {
			step, rec.Step = s.script[s.next], s.next
			s.next++
		} else {
			s.exhausted++
		}
	}
	s.mu.Unlock()

	if rec.Rejection != nil {
		s.t.Logf("openaitest: rejected request %d: %s", n, rec.Rejection.Message)
		writeError(w, status, rec.Rejection, nil)
		return
	}
	if step == nil {
		writeError(w, http.StatusInternalServerError, &APIError{
			Message: fmt.Sprintf("openaitest: no script step left for this request (script has %d steps)", len(s.script)),
			Type:    "server_error",
		}, nil)
		return
	}

	reply := step.Respond(rec)
	if reply.Delay > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(reply.Delay):
		}
	}
	for k, vs := range reply.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if reply.Status >= 400 {
		writeError(w, reply.Status, replyError(reply), &reply)
		return
	}
	a := newAnswer(rec, wire, reply)
	if wire.Stream {
		a.stream(w, wantUsage(wire.StreamOptions))
		return
	}
	a.whole(w)
}

// replyError is the error body of a failing reply.
func replyError(r Reply) *APIError {
	if r.Error != nil {
		return r.Error
	}
	return &APIError{Message: fmt.Sprintf("openaitest: scripted %d %s", r.Status, http.StatusText(r.Status)), Type: errorType(r.Status)}
}

// wantUsage reports whether stream_options asked for the usage chunk.
func wantUsage(raw json.RawMessage) bool {
	var o struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.IncludeUsage
}

// writeError sends an OpenAI-style error response; a reply may add Retry-After.
func writeError(w http.ResponseWriter, status int, e *APIError, r *Reply) {
	if r != nil && r.RetryAfter > 0 {
		secs := (r.RetryAfter.Milliseconds() + 999) / 1000
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		w.Header().Set("retry-after-ms", fmt.Sprint(r.RetryAfter.Milliseconds()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]*APIError{"error": e})
}
