// Package openaitest runs a scripted, OpenAI-compatible chat completions server for tests.
//
// It exists so that code which talks to an OpenAI-style endpoint — an agent loop built on
// github.com/sashabaranov/go-openai, a langchaingo chain, your own HTTP client — can be tested
// offline, deterministically, and against the same rules the real API enforces. The server
// listens on 127.0.0.1 only and never contacts anything.
//
// # A script
//
// A test writes down what the "model" answers, turn by turn:
//
//	srv := openaitest.New(t,
//		openaitest.Reply{ToolCalls: []openaitest.ToolCall{
//			{Name: "add", Arguments: `{"a":1,"b":2}`},
//			{Name: "add", Arguments: `{"a":3,"b":4}`},
//		}},
//		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
//			results := req.ToolResults() // tool_call_id -> content the client sent back
//			return openaitest.Text("the sums are " + results["call_1_0"] + " and " + results["call_1_1"])
//		}),
//	)
//	client := srv.Client() // a go-openai client; or point any client at srv.URL
//
// Each request to POST /v1/chat/completions consumes the next [Step]. A [Reply] is a fixed
// answer; a [StepFunc] computes the answer from the recorded [Request], which is how a test
// checks what the client sent at that turn (and fails the test from inside the step if it
// must). [Server.Requests] returns every request afterwards, decoded.
//
// # Streaming
//
// When the request says "stream": true the reply is sent as server-sent events, the way the
// real API sends it: a first delta with the assistant role, text and refusal in fragments, tool
// calls whose first delta carries index, id, type and name with empty arguments and whose
// later deltas carry only the index and an argument fragment, a last delta with the finish
// reason, then — only if the request set stream_options.include_usage — a chunk with empty
// choices carrying the usage, and finally "data: [DONE]". Parallel tool calls interleave their
// fragments by default (the hardest case for an accumulator); [Reply.Sequential] sends them one
// after another instead. [Reply.FragmentSize] sets the fragment length.
//
// # Failures, for retry tests
//
// A Reply with Status >= 400 answers with that HTTP status and an OpenAI-style error body
// ([RateLimited] adds Retry-After). [Reply.ErrorAfter] sends an error event in the middle of a
// stream (what a 500 mid-stream looks like to a client); [Reply.DropAfter] cuts the connection
// mid-stream without [DONE]. [Reply.Delay] holds the answer back, for timeout tests.
//
// # Rejections
//
// Before it consults the script, the server checks the request the way the real API does and
// answers 400 with an OpenAI-style error body when the real API would: a missing API key (401),
// a tool message whose tool_call_id answers no tool call of the assistant message before it, an
// assistant message with tool_calls that is not followed by a tool message for every call id, a
// tool message without content, a function name outside ^[a-zA-Z0-9_-]{1,64}$, parameters that
// are not an object schema, strict:true with a schema that strict mode refuses (an object
// without additionalProperties:false, or whose required list misses a property), more than 128
// tools, and tool_choice or parallel_tool_calls in a request without tools. A rejected
// request does not consume a script step; it is recorded with [Request.Rejection] set, so a
// test can assert that a client's mistake would have been caught.
//
// The server's checks are a useful subset of the real API's, not all of them: passing here
// means the request is free of the mistakes above, not that OpenAI will accept it.
//
// When the test ends, the server is closed, and the test fails if script steps were never
// requested or a request arrived after the script ran out.
package openaitest
