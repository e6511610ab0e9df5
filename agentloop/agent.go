package agentloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// DefaultMaxSteps is the step limit of an Agent whose MaxSteps is zero.
const DefaultMaxSteps = 25

// Agent is one configured function-calling loop. Fill in the fields, then call Run; an Agent
// may be Run many times (not concurrently when it writes a Transcript).
type Agent struct {
	// Client talks to the endpoint. Make it with NewClient so Retry-After is honoured, or
	// with ReplayClient to replay a transcript. Required.
	Client *goopenai.Client
	// Model is the model name the endpoint expects. Required.
	Model string
	// System is the system prompt; empty sends none.
	System string
	// Tools are the tools the model may call. Required (it may be empty), unless
	// Sandboxes is set.
	Tools *toolkit.Toolkit
	// Sandboxes, when set, gives every Run a fresh sandbox of its own from this pool, and
	// the run's tools are built on it by ToolsFor (leave Tools nil). Taking a ready
	// sandbox is a channel receive and a ping, and the pool starts a replacement in the
	// background, so neither a run's start nor its first tool call waits for a sandbox to
	// be created (see sandbox.PoolConfig for what happens when the pool is empty). No
	// sandbox serves two runs: concurrent Runs get one each. Run closes the run's sandbox
	// when it returns, unless KeepSandbox is set.
	Sandboxes *sandbox.Pool
	// ToolsFor builds a run's tools on the sandbox taken from Sandboxes (default: the
	// built-in tools, toolkit.ForSandbox(sb)). Choose a subset or set a policy here.
	ToolsFor func(sb *sandbox.Sandbox) (*toolkit.Toolkit, error)
	// KeepSandbox leaves the run's sandbox from Sandboxes open when Run returns, in
	// Result.Sandbox, for the caller to inspect (grade what the run left, say) and close.
	KeepSandbox bool
	// Dispatch adjusts how each step's tool calls run (parallelism, image detail).
	Dispatch []openaitools.Option

	// MaxSteps bounds the model calls of one run (default DefaultMaxSteps).
	MaxSteps int
	// MaxTokens is the run's token budget, prompt and completion tokens of every call
	// together; no new model call starts once it is spent. 0 means no budget.
	MaxTokens int
	// ContextWindow is the model's context window in tokens (default 128000). Set it for
	// small local models: it decides when old tool outputs are shortened.
	ContextWindow int
	// Retry says how failed model calls are retried.
	Retry RetryPolicy

	// OnEvent, when set, receives every event of a run, in order, on Run's goroutine; it
	// must not block for long.
	OnEvent func(Event)
	// Transcript, when set, receives the run as JSON lines (see Record).
	Transcript io.Writer
	// Prepare, when set, adjusts each request before it is sent (temperature, max tokens,
	// seed...). It must not remove messages or tools.
	Prepare func(*goopenai.ChatCompletionRequest)
}

// StopReason says why a run ended.
type StopReason string

// The reasons a run ends.
const (
	// StopAnswered: the model answered without calling a tool; Result.Answer is its answer.
	StopAnswered StopReason = "answered"
	// StopLength: the model's answer was cut at its output limit (finish reason "length").
	StopLength StopReason = "length"
	// StopRefused: the model declined (a refusal); Result.Answer holds the refusal.
	StopRefused StopReason = "refused"
	// StopMaxSteps: Agent.MaxSteps model calls were made and the last still called tools.
	StopMaxSteps StopReason = "max_steps"
	// StopTokenBudget: Agent.MaxTokens was spent before the model answered.
	StopTokenBudget StopReason = "token_budget"
	// StopContextFull: the conversation does not fit the context window even with every
	// older tool output shortened.
	StopContextFull StopReason = "context_full"
	// StopCanceled: ctx ended; Run returned ctx.Err().
	StopCanceled StopReason = "canceled"
	// StopError: the endpoint or a tool failed for good; Run returned the error.
	StopError StopReason = "error"
)

// Usage is token accounting, summed over a run's model calls.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`     // tokens sent
	CompletionTokens int `json:"completion_tokens"` // tokens the model wrote
	TotalTokens      int `json:"total_tokens"`      // their sum
	// Estimated says some calls reported no usage and were estimated (bytes/4).
	Estimated bool `json:"estimated,omitempty"`
}

func (u *Usage) add(v Usage) {
	u.PromptTokens += v.PromptTokens
	u.CompletionTokens += v.CompletionTokens
	u.TotalTokens += v.TotalTokens
	u.Estimated = u.Estimated || v.Estimated
}

// Result is the outcome of a run. Run returns one even with an error, holding what was done
// until then.
type Result struct {
	// Reason says why the run stopped.
	Reason StopReason
	// Answer is the model's final text (StopAnswered, StopLength, StopRefused); empty
	// otherwise.
	Answer string
	// Steps counts model calls that produced a turn; ToolCalls counts the calls run.
	Steps     int
	ToolCalls int
	// Retries counts failed model calls that were tried again.
	Retries int
	// Usage sums the tokens of the run's model calls.
	Usage Usage
	// Elapsed is the run's wall time.
	Elapsed time.Duration
	// Messages is the whole conversation, as sent at the last step plus the last turn
	// (older tool outputs may be shortened). Append to it to continue by hand.
	Messages []goopenai.ChatCompletionMessage
	// Sandbox is the sandbox the run took from Agent.Sandboxes (nil without a pool). It
	// is closed already unless Agent.KeepSandbox is set; then the caller closes it.
	Sandbox *sandbox.Sandbox
}

// turn is one model answer.
type turn struct {
	msg    goopenai.ChatCompletionMessage
	finish goopenai.FinishReason
	usage  *goopenai.Usage
}

// Run gives the model the task and loops until a stop condition (see StopReason). Reaching
// a limit returns a Result with that reason and a nil error. When ctx ends Run returns
// ctx.Err(); when the endpoint fails for good (after retries, or a request it refuses) or a
// tool hits an infrastructure failure, the error says which. With Agent.Sandboxes, Run first
// takes the run's sandbox from the pool; if that fails (a closed pool, starts failing, ctx
// ending while it waits for one) Run returns the error and a Result with StopError or
// StopCanceled, and writes nothing to the transcript.
func (a *Agent) Run(ctx context.Context, task string) (*Result, error) {
	switch {
	case a.Client == nil:
		return nil, errors.New("agentloop: Agent.Client is nil (use NewClient or ReplayClient)")
	case a.Model == "":
		return nil, errors.New("agentloop: Agent.Model is empty")
	case a.Tools == nil && a.Sandboxes == nil:
		return nil, errors.New("agentloop: Agent.Tools is nil (toolkit.Of() makes an empty one; or set Agent.Sandboxes)")
	case a.Tools != nil && a.Sandboxes != nil:
		return nil, errors.New("agentloop: both Agent.Tools and Agent.Sandboxes are set; with a pool, the run's tools come from Agent.ToolsFor")
	}
	start := time.Now()
	kit, sb, err := a.toolsForRun(ctx)
	if err != nil {
		res := &Result{Reason: StopError, Elapsed: time.Since(start)}
		if ctx.Err() != nil {
			res.Reason = StopCanceled
			err = ctx.Err()
		}
		if a.OnEvent != nil {
			a.OnEvent(Finished{Result: res, Err: err})
		}
		return res, err
	}
	if sb != nil && !a.KeepSandbox {
		defer sb.Close()
	}
	r := &run{
		a:      a,
		kit:    kit,
		start:  start,
		rec:    &recorder{w: a.Transcript},
		budget: newBudget(a.ContextWindow),
		policy: a.Retry.withDefaults(),
		tools:  openaitools.Tools(kit),
	}
	r.res.Sandbox = sb
	if b, err := json.Marshal(r.tools); err == nil {
		r.toolBytes = len(b)
	}
	if a.System != "" {
		r.msgs = append(r.msgs, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleSystem, Content: a.System})
	}
	r.msgs = append(r.msgs, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, Content: task})
	names := make([]string, 0, len(r.tools))
	for _, t := range kit.Tools() {
		names = append(names, t.Name())
	}
	if err := r.rec.write(Record{Kind: KindStart, Model: a.Model, System: a.System, Task: task, Tools: names}); err != nil {
		return r.finish(StopError, "", err)
	}
	return r.loop(ctx)
}

// toolsForRun returns the tools of one run: Agent.Tools, or tools built on a sandbox
// taken from Agent.Sandboxes, which the run then owns.
func (a *Agent) toolsForRun(ctx context.Context) (*toolkit.Toolkit, *sandbox.Sandbox, error) {
	if a.Sandboxes == nil {
		return a.Tools, nil, nil
	}
	sb, err := a.Sandboxes.Get(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("agentloop: taking a sandbox from Agent.Sandboxes: %w", err)
	}
	build := a.ToolsFor
	if build == nil {
		build = func(sb *sandbox.Sandbox) (*toolkit.Toolkit, error) { return toolkit.ForSandbox(sb), nil }
	}
	kit, err := build(sb)
	if err == nil && kit == nil {
		err = errors.New("it returned no toolkit")
	}
	if err != nil {
		sb.Close()
		return nil, nil, fmt.Errorf("agentloop: Agent.ToolsFor: %w", err)
	}
	return kit, sb, nil
}

// run is the state of one Run.
type run struct {
	a         *Agent
	kit       *toolkit.Toolkit // the run's tools: Agent.Tools or built by Agent.ToolsFor
	start     time.Time
	rec       *recorder
	budget    *budget
	policy    RetryPolicy
	tools     []goopenai.Tool
	toolBytes int
	msgs      []goopenai.ChatCompletionMessage
	res       Result
}

func (r *run) emit(e Event) {
	if r.a.OnEvent != nil {
		r.a.OnEvent(e)
	}
}

func (r *run) loop(ctx context.Context) (*Result, error) {
	maxSteps := r.a.MaxSteps
	if maxSteps <= 0 {
		maxSteps = DefaultMaxSteps
	}
	// keep is where the latest turn's results begin; fit never shortens from there on.
	keep := len(r.msgs)
	for step := 1; ; step++ {
		if err := ctx.Err(); err != nil {
			return r.finish(StopCanceled, "", err)
		}
		if step > maxSteps {
			return r.finish(StopMaxSteps, "", nil)
		}
		if r.a.MaxTokens > 0 && r.res.Usage.TotalTokens >= r.a.MaxTokens {
			return r.finish(StopTokenBudget, "", nil)
		}
		before := r.budget.estimate(r.msgs, r.toolBytes)
		est, n := r.budget.fit(r.msgs, keep, r.toolBytes)
		if n > 0 {
			r.emit(Shortened{Step: step, Messages: n, Before: before, After: est})
		}
		if est > r.budget.limit() {
			return r.finish(StopContextFull, "", nil)
		}
		r.emit(StepStarted{Step: step, Messages: len(r.msgs), EstimatedTokens: est})

		req := goopenai.ChatCompletionRequest{
			Model:         r.a.Model,
			Messages:      r.msgs,
			Tools:         r.tools,
			Stream:        true,
			StreamOptions: &goopenai.StreamOptions{IncludeUsage: true},
		}
		if len(r.tools) == 0 {
			req.Tools = nil
		}
		if r.a.Prepare != nil {
			r.a.Prepare(&req)
		}
		t, err := r.complete(ctx, req, step)
		if err != nil {
			if ctx.Err() != nil {
				return r.finish(StopCanceled, "", ctx.Err())
			}
			return r.finish(StopError, "", fmt.Errorf("agentloop: step %d: %w", step, err))
		}
		r.res.Steps = step
		r.account(req.Messages, t)
		r.msgs = append(r.msgs, t.msg)
		if err := r.rec.write(Record{Kind: KindTurn, Step: step, Message: &t.msg, FinishReason: string(t.finish), Usage: usageOf(t.usage)}); err != nil {
			return r.finish(StopError, "", err)
		}

		if len(t.msg.ToolCalls) == 0 {
			switch {
			case t.msg.Refusal != "":
				return r.finish(StopRefused, t.msg.Refusal, nil)
			case t.finish == goopenai.FinishReasonLength:
				return r.finish(StopLength, t.msg.Content, nil)
			}
			return r.finish(StopAnswered, t.msg.Content, nil)
		}
		for _, c := range t.msg.ToolCalls {
			r.emit(ToolCall{Step: step, ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		began := time.Now()
		out, err := openaitools.Dispatch(ctx, r.kit, t.msg.ToolCalls, r.a.Dispatch...)
		if err != nil {
			if ctx.Err() != nil {
				return r.finish(StopCanceled, "", ctx.Err())
			}
			return r.finish(StopError, "", fmt.Errorf("agentloop: step %d: %w", step, err))
		}
		elapsed := time.Since(began)
		r.res.ToolCalls += len(t.msg.ToolCalls)
		names := make(map[string]string, len(t.msg.ToolCalls))
		for _, c := range t.msg.ToolCalls {
			names[c.ID] = c.Function.Name
		}
		for _, m := range out {
			if m.Role != goopenai.ChatMessageRoleTool {
				continue // the message carrying images; its tool message says so
			}
			r.emit(ToolResult{Step: step, ID: m.ToolCallID, Name: names[m.ToolCallID], Content: m.Content, Elapsed: elapsed})
			if err := r.rec.write(Record{Kind: KindToolResult, Step: step, ToolCallID: m.ToolCallID, Tool: names[m.ToolCallID], Content: m.Content}); err != nil {
				return r.finish(StopError, "", err)
			}
		}
		keep = len(r.msgs)
		r.msgs = append(r.msgs, out...)
	}
}

// account adds a turn's usage to the totals, estimating what the endpoint did not report,
// and calibrates the token estimate from what it did.
func (r *run) account(sent []goopenai.ChatCompletionMessage, t turn) {
	if t.usage != nil && t.usage.TotalTokens > 0 {
		r.budget.learn(sent, r.toolBytes, t.usage.PromptTokens)
		r.res.Usage.add(Usage{PromptTokens: t.usage.PromptTokens, CompletionTokens: t.usage.CompletionTokens, TotalTokens: t.usage.TotalTokens})
		return
	}
	prompt := r.budget.estimate(sent, r.toolBytes)
	completion := r.budget.estimate([]goopenai.ChatCompletionMessage{t.msg}, 0)
	r.res.Usage.add(Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion, Estimated: true})
}

func usageOf(u *goopenai.Usage) *Usage {
	if u == nil {
		return nil
	}
	return &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}

// finish ends the run: it fills in the result, records the end and sends Finished.
func (r *run) finish(reason StopReason, answer string, err error) (*Result, error) {
	r.res.Reason = reason
	r.res.Answer = answer
	r.res.Elapsed = time.Since(r.start)
	r.res.Messages = r.msgs
	end := Record{Kind: KindEnd, Reason: reason, Answer: answer, Usage: &r.res.Usage, ElapsedMS: r.res.Elapsed.Milliseconds()}
	if err != nil {
		end.Error = err.Error()
	}
	if werr := r.rec.write(end); werr != nil && err == nil {
		err = werr
		r.res.Reason = StopError
	}
	res := r.res
	r.emit(Finished{Result: &res, Err: err})
	return &res, err
}

// complete makes one model call, retrying what is worth retrying.
func (r *run) complete(ctx context.Context, req goopenai.ChatCompletionRequest, step int) (turn, error) {
	for attempt := 0; ; attempt++ {
		hint := &retryHint{}
		t, err := r.stream(context.WithValue(ctx, hintKey{}, hint), req, step)
		if err == nil {
			return t, nil
		}
		if ctx.Err() != nil {
			return turn{}, ctx.Err()
		}
		if !retryable(err) || attempt >= r.policy.MaxRetries {
			if attempt > 0 {
				return turn{}, fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return turn{}, err
		}
		wait := r.policy.backoff(attempt)
		if after, ok := hint.get(); ok {
			if after > r.policy.MaxRetryAfter {
				return turn{}, errRetryAfterTooLong(after, r.policy.MaxRetryAfter, err)
			}
			wait = after
		}
		r.res.Retries++
		r.emit(Retry{Step: step, Attempt: attempt + 1, Err: err, Wait: wait})
		if werr := r.rec.write(Record{Kind: KindRetry, Step: step, Attempt: attempt + 1, WaitMS: wait.Milliseconds(), Error: err.Error()}); werr != nil {
			return turn{}, werr
		}
		if err := sleep(ctx, wait); err != nil {
			return turn{}, err
		}
	}
}

// stream makes one streamed model call, sending text deltas as they arrive.
func (r *run) stream(ctx context.Context, req goopenai.ChatCompletionRequest, step int) (turn, error) {
	s, err := r.a.Client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return turn{}, err
	}
	defer s.Close()
	var acc openaitools.Accumulator
	for {
		chunk, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return turn{}, err
		}
		if err := acc.Add(chunk); err != nil {
			return turn{}, err
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" {
				r.emit(TextDelta{Step: step, Text: c.Delta.Content})
			}
		}
	}
	if acc.FinishReason() == "" {
		return turn{}, fmt.Errorf("%w (a connection cut mid-answer?)", openaitools.ErrIncompleteStream)
	}
	return turn{msg: acc.Message(), finish: acc.FinishReason(), usage: acc.Usage()}, nil
}
