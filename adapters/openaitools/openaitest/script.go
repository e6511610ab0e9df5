package openaitest

import (
	"net/http"
	"time"
)

// Step is one turn of the script: it produces the answer to one chat completion request.
// [Reply] (a fixed answer) and [StepFunc] (an answer computed from the request) implement it.
type Step interface {
	Respond(req *Request) Reply
}

// StepFunc turns a function into a [Step], for answers that depend on what the client sent,
// and for checking the request at that turn (call t.Errorf inside; the function runs on the
// server's goroutine, so use t.Errorf, not t.Fatalf).
type StepFunc func(req *Request) Reply

// Respond calls f.
func (f StepFunc) Respond(req *Request) Reply { return f(req) }

// Reply is the scripted answer to one request. The zero Reply is an empty assistant message
// with finish reason "stop".
type Reply struct {
	// Text is the assistant's message content.
	Text string
	// Refusal is sent in message.refusal (delta.refusal when streaming), the way the API
	// reports that the model declined.
	Refusal string
	// ToolCalls are the function calls the assistant makes in this turn; several are parallel
	// calls.
	ToolCalls []ToolCall
	// FinishReason overrides the finish reason, which is otherwise "tool_calls" when there are
	// tool calls and "stop" when there are none (set "length" or "content_filter" to test
	// those paths).
	FinishReason string
	// Usage overrides the token counts. Without it the server estimates them (about four
	// bytes a token), which is enough for code that sums usage.
	Usage *Usage

	// Status, when >= 400, makes the server answer with this HTTP status and an OpenAI-style
	// error body (Error, or a default for the status) instead of a completion.
	Status int
	// Error is the error body sent with Status or with ErrorAfter.
	Error *APIError
	// RetryAfter is sent as the Retry-After (whole seconds, rounded up) and retry-after-ms
	// headers of an error reply.
	RetryAfter time.Duration
	// Header holds extra response headers, e.g. x-ratelimit-remaining-requests.
	Header http.Header
	// Delay holds the answer back this long (or until the client gives up).
	Delay time.Duration

	// FragmentSize is how many bytes of text or arguments each streamed delta carries
	// (default 8; fragments never split a UTF-8 character).
	FragmentSize int
	// Sequential streams parallel tool calls one after another, as OpenAI does; by default
	// their argument fragments interleave, which clients that join fragments by position
	// rather than by index (langchaingo v0.1.14's stream reader) cannot follow.
	Sequential bool
	// ErrorAfter, when > 0, ends a streamed answer after this many chunks with an error event
	// ("data: {"error": ...}", Error or a server_error), which is what a server failure in
	// the middle of a stream looks like to a client.
	ErrorAfter int
	// DropAfter, when > 0, cuts the connection after this many chunks, without "[DONE]": a
	// broken stream.
	DropAfter int
}

// Respond returns r itself, so a Reply is a Step.
func (r Reply) Respond(*Request) Reply { return r }

// ToolCall is one function call in a [Reply].
type ToolCall struct {
	// ID is the tool call id the client must answer. Empty means the server makes one up:
	// "call_<step>_<i>", where step counts script steps from 1 and i counts calls in the
	// reply from 0.
	ID string
	// Name is the function's name.
	Name string
	// Arguments is the JSON text of the arguments, sent verbatim (so it can be malformed on
	// purpose); empty means "{}".
	Arguments string
}

// Usage is the token accounting of a reply, as the API reports it.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// APIError is an OpenAI-style error: the object under "error" in an error response body.
type APIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Error returns the message, so an APIError can be used as a Go error.
func (e *APIError) Error() string { return e.Message }

// Text is a Reply with only assistant text.
func Text(s string) Reply { return Reply{Text: s} }

// Call is a Reply that makes one tool call with a server-chosen id.
func Call(name, arguments string) Reply {
	return Reply{ToolCalls: []ToolCall{{Name: name, Arguments: arguments}}}
}

// Refusal is a Reply in which the model declines.
func Refusal(s string) Reply { return Reply{Refusal: s} }

// Fail is a Reply answering with the HTTP status and an OpenAI-style error carrying message.
func Fail(status int, message string) Reply {
	return Reply{Status: status, Error: &APIError{Message: message, Type: errorType(status)}}
}

// RateLimited is a 429 reply telling the client to retry after d.
func RateLimited(d time.Duration) Reply {
	code := "rate_limit_exceeded"
	return Reply{
		Status:     http.StatusTooManyRequests,
		RetryAfter: d,
		Error: &APIError{
			Message: "Rate limit reached for requests (openaitest). Please try again later.",
			Type:    "requests",
			Code:    &code,
		},
	}
}

// errorType is the "type" the API uses for errors of an HTTP status.
func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "invalid_request_error"
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}
