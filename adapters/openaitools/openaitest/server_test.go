package openaitest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func userRequest(text string) goopenai.ChatCompletionRequest {
	return goopenai.ChatCompletionRequest{
		Model:    "gpt-test",
		Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: text}},
	}
}

// post sends a raw body, for the wire details and rejections a client library would hide.
func post(t *testing.T, srv *openaitest.Server, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestReplyWithoutStreaming(t *testing.T) {
	srv := openaitest.New(t,
		openaitest.Text("hello there"),
		openaitest.Reply{ToolCalls: []openaitest.ToolCall{{Name: "add", Arguments: `{"a":1}`}, {ID: "mine", Name: "sub"}}},
		openaitest.Refusal("I can't help with that."),
	)
	c := srv.Client()
	ctx := context.Background()

	resp, err := c.CreateChatCompletion(ctx, userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "hello there" {
		t.Errorf("content = %q", got)
	}
	if resp.Choices[0].FinishReason != goopenai.FinishReasonStop || resp.Usage.TotalTokens == 0 {
		t.Errorf("finish = %q, usage = %+v; want stop and a usage", resp.Choices[0].FinishReason, resp.Usage)
	}

	resp, err = c.CreateChatCompletion(ctx, userRequest("call"))
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Choices[0].Message.ToolCalls
	if len(calls) != 2 || calls[0].ID != "call_2_0" || calls[0].Function.Arguments != `{"a":1}` ||
		calls[1].ID != "mine" || calls[1].Function.Arguments != "{}" || calls[1].Type != goopenai.ToolTypeFunction {
		t.Errorf("tool calls = %+v", calls)
	}
	if resp.Choices[0].FinishReason != goopenai.FinishReasonToolCalls {
		t.Errorf("finish = %q, want tool_calls", resp.Choices[0].FinishReason)
	}

	resp, err = c.CreateChatCompletion(ctx, userRequest("bad"))
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.Choices[0].Message; m.Refusal != "I can't help with that." || m.Content != "" {
		t.Errorf("refusal message = %+v", m)
	}

	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[1].LastMessage().Content != "call" || reqs[2].Step != 2 {
		t.Errorf("recorded %d requests; second last message %q", len(reqs), reqs[1].LastMessage().Content)
	}
}

// streamChunks reads a whole stream with the real go-openai client.
func streamChunks(t *testing.T, c *goopenai.Client, req goopenai.ChatCompletionRequest) []goopenai.ChatCompletionStreamResponse {
	t.Helper()
	stream, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out []goopenai.ChatCompletionStreamResponse
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("after %d chunks: %v", len(out), err)
		}
		out = append(out, chunk)
	}
}

func TestStreamedParallelCallsFollowTheWireFormat(t *testing.T) {
	calls := []openaitest.ToolCall{
		{Name: "add", Arguments: `{"a": 1, "b": 2}`},
		{Name: "mul", Arguments: `{"a": 3, "b": 4, "note": "ünïcödé"}`},
	}
	for _, tc := range []struct {
		name       string
		sequential bool
		wantOrder  string // the index of each tool-call delta, in stream order
	}{
		{"parallel calls interleave by default", false, "0101010101111111"},
		{"sequential calls arrive one after another", true, "0000011111111111"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t, openaitest.Reply{ToolCalls: calls, FragmentSize: 4, Sequential: tc.sequential})
			req := userRequest("go")
			req.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
			chunks := streamChunks(t, srv.Client(), req)

			var order strings.Builder
			args := map[int]string{}
			for _, ch := range chunks {
				for _, choice := range ch.Choices {
					for _, d := range choice.Delta.ToolCalls {
						i := *d.Index
						fmt.Fprint(&order, i)
						if _, seen := args[i]; !seen {
							if d.ID == "" || d.Type != "function" || d.Function.Name != calls[i].Name || d.Function.Arguments != "" {
								t.Errorf("first delta of call %d = %+v; want id, type, name and empty arguments", i, d)
							}
						} else if d.ID != "" || d.Type != "" || d.Function.Name != "" {
							t.Errorf("later delta of call %d carries more than index and arguments: %+v", i, d)
						}
						args[i] += d.Function.Arguments
					}
				}
			}
			if order.String() != tc.wantOrder {
				t.Errorf("delta order = %s, want %s", order.String(), tc.wantOrder)
			}
			for i, c := range calls {
				if args[i] != c.Arguments {
					t.Errorf("call %d arguments reassembled to %q, want %q", i, args[i], c.Arguments)
				}
			}
			last := chunks[len(chunks)-1]
			if len(last.Choices) != 0 || last.Usage == nil || last.Usage.TotalTokens == 0 {
				t.Errorf("last chunk = %+v; want only usage, with empty choices", last)
			}
			if fin := chunks[len(chunks)-2].Choices[0].FinishReason; fin != goopenai.FinishReasonToolCalls {
				t.Errorf("finish reason = %q", fin)
			}
		})
	}
}

func TestStreamedTextAndRefusal(t *testing.T) {
	srv := openaitest.New(t,
		openaitest.Reply{Text: "The answer is 42.", FragmentSize: 5},
		openaitest.Reply{Refusal: "No."},
	)
	var text string
	chunks := streamChunks(t, srv.Client(), userRequest("q"))
	for _, ch := range chunks {
		if ch.Usage != nil {
			t.Errorf("usage chunk sent although the request did not ask for it")
		}
		text += ch.Choices[0].Delta.Content
	}
	if text != "The answer is 42." || len(chunks) != 6 {
		t.Errorf("text %q in %d chunks; want it in 4 fragments between role and finish chunks", text, len(chunks))
	}
	var refusal string
	for _, ch := range streamChunks(t, srv.Client(), userRequest("q")) {
		refusal += ch.Choices[0].Delta.Refusal
	}
	if refusal != "No." {
		t.Errorf("refusal = %q", refusal)
	}
}

func TestScriptedFailures(t *testing.T) {
	srv := openaitest.New(t,
		openaitest.RateLimited(1500*time.Millisecond),
		openaitest.Fail(http.StatusInternalServerError, "boom"),
		openaitest.Reply{Text: "a long text that will not finish", FragmentSize: 4, ErrorAfter: 3},
		openaitest.Reply{Text: "a long text that will not finish", FragmentSize: 4, DropAfter: 3},
		openaitest.Text("recovered"),
	)
	c := srv.Client()
	ctx := context.Background()

	resp, body := post(t, srv, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || resp.Header.Get("retry-after-ms") != "1500" {
		t.Errorf("rate limit answer: %d, Retry-After %q, retry-after-ms %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"))
	}
	if !strings.Contains(string(body), `"code":"rate_limit_exceeded"`) {
		t.Errorf("rate limit body = %s", body)
	}

	_, err := c.CreateChatCompletion(ctx, userRequest("x"))
	var apiErr *goopenai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 500 || apiErr.Message != "boom" {
		t.Errorf("500 reply gave %v", err)
	}

	for _, want := range []string{"server error in the middle", "unexpected EOF"} {
		stream, err := c.CreateChatCompletionStream(ctx, userRequest("x"))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for {
			_, err = stream.Recv()
			if err != nil {
				break
			}
			got++
		}
		stream.Close()
		if got != 3 || err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), want) {
			t.Errorf("after %d chunks the stream ended with %v; want 3 chunks then an error containing %q", got, err, want)
		}
	}

	resp2, err := c.CreateChatCompletion(ctx, userRequest("x"))
	if err != nil || resp2.Choices[0].Message.Content != "recovered" {
		t.Errorf("the script did not continue after failures: %v", err)
	}
}

func TestStepFuncSeesTheRequest(t *testing.T) {
	srv := openaitest.New(t,
		openaitest.Call("add", `{"a":2,"b":3}`),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			return openaitest.Text("result was " + req.ToolResults()["call_1_0"])
		}),
	)
	c := srv.Client()
	req := userRequest("add 2 and 3")
	resp, err := c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	req.Messages = append(req.Messages, msg, goopenai.ChatCompletionMessage{
		Role: "tool", ToolCallID: msg.ToolCalls[0].ID, Content: "5",
	})
	resp, err = c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "result was 5" {
		t.Errorf("content = %q", got)
	}
}

func TestRejectsWhatTheAPIRejects(t *testing.T) {
	const (
		user      = `{"role":"user","content":"x"}`
		assistant = `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	)
	body := func(messages string, tools string) string {
		b := `{"model":"m","messages":[` + messages + `]`
		if tools != "" {
			b += `,"tools":[` + tools + `]`
		}
		return b + "}"
	}
	fn := func(name, params string, strict bool) string {
		return fmt.Sprintf(`{"type":"function","function":{"name":%q,"parameters":%s,"strict":%t}}`, name, params, strict)
	}
	for _, tc := range []struct {
		name, body, wantMsg, wantParam string
	}{
		{"body that is not JSON", `{"model":`, "could not parse the JSON body", ""},
		{"no model", `{"messages":[` + user + `]}`, "must provide a model", "model"},
		{"no messages", `{"model":"m","messages":[]}`, "too short", "messages"},
		{"tool message answering no call", body(user+`,{"role":"tool","tool_call_id":"c9","content":"r"}`, ""),
			"must be a response to a preceeding message with 'tool_calls'", "messages.[1].role"},
		{"tool message answering an unknown call id", body(user+","+assistant+`,{"role":"tool","tool_call_id":"c9","content":"r"}`, ""),
			"'tool_call_id' of 'c9' not found", "messages.[2].tool_call_id"},
		{"tool calls with a missing result before the next user turn", body(user+","+assistant+`,{"role":"tool","tool_call_id":"c1","content":"r"},`+user, ""),
			"did not have response messages: c2", "messages.[1].role"},
		{"tool calls without results at the end", body(user+","+assistant, ""),
			"did not have response messages: c1, c2", "messages.[1].role"},
		{"tool message without content", body(user+","+assistant+`,{"role":"tool","tool_call_id":"c1"},{"role":"tool","tool_call_id":"c2","content":"r"}`, ""),
			"Missing required parameter: 'messages.[2].content'", "messages.[2].content"},
		{"tool message without tool_call_id", body(user+","+assistant+`,{"role":"tool","content":"r"}`, ""),
			"Missing required parameter: 'messages.[2].tool_call_id'", "messages.[2].tool_call_id"},
		{"image sent by a tool message", body(user+","+assistant+`,{"role":"tool","tool_call_id":"c1","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}`, ""),
			"Invalid value: 'image_url'. Supported values for role 'tool' are: 'text'", "messages.[2].content.[0].type"},
		{"content part of an unknown type", body(`{"role":"user","content":[{"type":"binary","binary":{}}]}`, ""),
			"Invalid value: 'binary'", "messages.[0].content.[0].type"},
		{"content that is an object", body(`{"role":"user","content":{"text":"x"}}`, ""),
			"expected one of a string or array of objects, but got an object", "messages.[0].content"},
		{"unknown role", body(`{"role":"robot","content":"x"}`, ""), "Invalid value: 'robot'", "messages.[0].role"},
		{"function name with a space", body(user, fn("run python", `{"type":"object"}`, false)), "does not match pattern", "tools[0].function.name"},
		{"function name of 65 characters", body(user, fn(strings.Repeat("a", 65), `{"type":"object"}`, false)), "string too long", "tools[0].function.name"},
		{"parameters that are not an object schema", body(user, fn("f", `{"type":"string"}`, false)), `must be a JSON Schema of 'type: "object"'`, "tools[0].function.parameters"},
		{"parameters that are not even an object", body(user, fn("f", `[1]`, false)), `must be a JSON Schema of 'type: "object"'`, "tools[0].function.parameters"},
		{"strict schema with additional properties allowed", body(user, fn("f", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, true)),
			"In context=(), 'additionalProperties' is required to be supplied and to be false", "tools[0].function.parameters"},
		{"strict schema missing a required property", body(user, fn("f", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}`, true)),
			"Missing 'b'", "tools[0].function.parameters"},
		{"strict schema with an open nested object", body(user, fn("f", `{"type":"object","properties":{"o":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"required":["o"],"additionalProperties":false}`, true)),
			"In context=('properties', 'o'), 'additionalProperties'", "tools[0].function.parameters"},
		{"strict schema with an open object in array items", body(user, fn("f", `{"type":"object","properties":{"l":{"type":"array","items":{"type":"object","properties":{}}}},"required":["l"],"additionalProperties":false}`, true)),
			"In context=('properties', 'l', 'items')", "tools[0].function.parameters"},
		{"empty tools array", body(user, "")[:len(body(user, ""))-1] + `,"tools":[]}`, "empty array", "tools"},
		{"tool_choice without tools", body(user, "")[:len(body(user, ""))-1] + `,"tool_choice":"auto"}`,
			"'tool_choice' is only allowed when 'tools' are specified", "tool_choice"},
		{"parallel_tool_calls without tools", body(user, "")[:len(body(user, ""))-1] + `,"parallel_tool_calls":false}`,
			"'parallel_tool_calls' is only allowed when 'tools' are specified", "parallel_tool_calls"},
		{"more than 128 tools", body(user, strings.TrimSuffix(strings.Repeat(fn("f", `{"type":"object"}`, false)+",", 129), ",")),
			"array too long. Expected an array with maximum length 128, but got an array with length 129", "tools"},
		{"stream_options without stream", `{"model":"m","messages":[` + user + `],"stream_options":{"include_usage":true}}`, "only allowed when 'stream' is enabled", "stream_options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t) // an empty script: a request that got through would fail the test
			resp, b := post(t, srv, tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, body %s; want 400", resp.StatusCode, b)
			}
			var e struct{ Error openaitest.APIError }
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("error body %s: %v", b, err)
			}
			if !strings.Contains(e.Error.Message, tc.wantMsg) || e.Error.Type != "invalid_request_error" {
				t.Errorf("error = %+v; want message containing %q", e.Error, tc.wantMsg)
			}
			if got := ""; e.Error.Param != nil && *e.Error.Param != tc.wantParam || e.Error.Param == nil && tc.wantParam != got {
				t.Errorf("param = %v, want %q", e.Error.Param, tc.wantParam)
			}
			if r := srv.Requests(); len(r) != 1 || r[0].Rejection == nil || r[0].Step != -1 {
				t.Errorf("the rejected request was not recorded as rejected")
			}
		})
	}
}

func TestAcceptsCorrectToolConversations(t *testing.T) {
	strict := `{"type":"function","function":{"name":"run_python","strict":true,"parameters":{"type":"object","properties":{"code":{"type":"string"},"opts":{"type":["object","null"],"properties":{"t":{"type":"integer"}},"required":["t"],"additionalProperties":false}},"required":["code","opts"],"additionalProperties":false}}}`
	loose := `{"type":"function","function":{"name":"free-form_2","parameters":{"type":"object","properties":{"m":{"type":"object"}}}}}`
	noParams := `{"type":"function","function":{"name":"ping"}}`
	msgs := `{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"ping","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"ping","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"b","content":"pong"},{"role":"tool","tool_call_id":"a","content":""},` +
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}`
	srv := openaitest.New(t, openaitest.Text("ok"))
	resp, b := post(t, srv, `{"model":"m","messages":[`+msgs+`],"tools":[`+strict+`,`+loose+`,`+noParams+`]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if got := srv.Requests()[0].ToolResults(); got["a"] != "" || got["b"] != "pong" || len(got) != 2 {
		t.Errorf("ToolResults = %v", got)
	}
}

func TestRejectsMissingAPIKey(t *testing.T) {
	srv := openaitest.New(t)
	resp, err := http.Post(srv.URL+"/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "invalid_api_key") {
		t.Errorf("status %d, body %s; want 401 invalid_api_key", resp.StatusCode, b)
	}
}

// recordingTB catches what the server reports to the test at cleanup.
type recordingTB struct {
	testing.TB
	errors   []string
	cleanups []func()
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) finish() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestScriptMismatchFailsTheTest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		steps    []openaitest.Step
		requests int
		want     string
	}{
		{"unrequested steps", []openaitest.Step{openaitest.Text("a"), openaitest.Text("b")}, 1, "1 of 2 script steps were never requested"},
		{"requests past the end", []openaitest.Step{openaitest.Text("a")}, 2, "1 request(s) arrived after the script"},
		{"script used exactly", []openaitest.Step{openaitest.Text("a")}, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingTB{TB: t}
			srv := openaitest.New(rec, tc.steps...)
			for i := 0; i < tc.requests; i++ {
				_, _ = srv.Client().CreateChatCompletion(context.Background(), userRequest("x"))
			}
			rec.finish()
			got := strings.Join(rec.errors, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("reported %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWrongPath(t *testing.T) {
	srv := openaitest.New(t)
	resp, err := http.Get(srv.URL + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(line, "Invalid URL (GET /v1/models)") {
		t.Errorf("status %d body %s", resp.StatusCode, line)
	}
}

func TestDelayAndHeaders(t *testing.T) {
	// The client gives up only once the delayed request has reached the script, so a slow
	// machine cannot let the deadline pass before the server sees the request.
	arrived := make(chan struct{})
	srv := openaitest.New(t,
		openaitest.StepFunc(func(*openaitest.Request) openaitest.Reply {
			close(arrived)
			return openaitest.Reply{Text: "late", Delay: time.Minute}
		}),
		openaitest.Reply{Text: "ok", Header: http.Header{"X-Ratelimit-Remaining-Requests": {"0"}}},
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-arrived; cancel() }()
	if _, err := srv.Client().CreateChatCompletion(ctx, userRequest("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("delayed reply: err = %v, want the client's cancellation", err)
	}
	resp, _ := post(t, srv, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	if got := resp.Header.Get("X-Ratelimit-Remaining-Requests"); got != "0" {
		t.Errorf("header = %q", got)
	}
}
