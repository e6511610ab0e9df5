package agentloop

import "time"

// Event is one thing that happened during [Agent.Run], for a UI to show. The concrete types
// are [StepStarted], [TextDelta], [ToolCall], [ToolResult], [Retry], [Shortened] and
// [Finished]; switch on them. The set is closed so that a switch can be exhaustive.
type Event interface {
	event()
}

// StepStarted opens a step: one model call and the tool calls of its answer.
type StepStarted struct {
	Step int // from 1
	// Messages is the length of the conversation sent, system prompt included.
	Messages int
	// EstimatedTokens is the size of the request as the loop estimates it (see the package
	// doc on the context window).
	EstimatedTokens int
}

// TextDelta is a fragment of the assistant's text as it streams in.
type TextDelta struct {
	Step int    // the step, from 1
	Text string // the fragment
}

// ToolCall is one complete tool call of the model's answer, sent before the calls run.
type ToolCall struct {
	Step      int    // the step, from 1
	ID        string // the call's id, as the model gave it
	Name      string // the tool called
	Arguments string // the JSON the model wrote, verbatim (possibly malformed)
}

// ToolResult is the answer to one tool call, as the model will read it. Results of one step
// arrive together, in the order of the calls, once every call of the step has finished
// (calls of one step may run in parallel).
type ToolResult struct {
	Step    int    // the step, from 1
	ID      string // the id of the call answered
	Name    string // the tool called
	Content string // the text the model reads
	// Elapsed is how long the step's tool calls took together.
	Elapsed time.Duration
}

// Retry says a model call failed in a way worth retrying and will be tried again after Wait.
// Text streamed during the failed attempt is void: a UI should drop it.
type Retry struct {
	Step    int           // the step, from 1
	Attempt int           // the attempt that failed, from 1
	Err     error         // why it failed
	Wait    time.Duration // how long the loop waits before the next attempt
}

// Shortened says that older tool outputs were shortened (or their images dropped) to keep
// the conversation within the context window.
type Shortened struct {
	Step     int // the step, from 1
	Messages int // how many messages were shortened
	Before   int // estimated request tokens before
	After    int // and after
}

// Finished ends the run. It carries what Run returns.
type Finished struct {
	Result *Result // Run's result
	Err    error   // Run's error
}

func (StepStarted) event() {}
func (TextDelta) event()   {}
func (ToolCall) event()    {}
func (ToolResult) event()  {}
func (Retry) event()       {}
func (Shortened) event()   {}
func (Finished) event()    {}
