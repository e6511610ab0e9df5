// Package agentloop is a ready-made function-calling loop over any OpenAI-compatible chat
// completions endpoint (OpenAI, Ollama, vLLM, LM Studio, OpenRouter), driving the tools of a
// toolkit.Toolkit — typically the built-in sandbox tools.
//
// An [Agent] is a plain struct, filled in like exec.Cmd:
//
//	a := &agentloop.Agent{
//		Client: agentloop.NewClient(goopenai.DefaultConfig(key)),
//		Model:  "gpt-4o-mini",
//		System: "You are a careful data analyst with a sandbox.",
//		Tools:  tk,
//		OnEvent: func(e agentloop.Event) { ... },
//	}
//	res, err := a.Run(ctx, "Plot the CSV in the workspace")
//
// Run asks the model (streaming), runs the tool calls of its answer through
// openaitools.Dispatch (parallel where the tools allow it), sends the results back, and
// repeats until the model answers without tool calls, [Agent.MaxSteps] model calls were made,
// the token budget [Agent.MaxTokens] is spent, or ctx ends. Reaching a limit is not an error:
// [Result.Reason] says why the run stopped. Errors are reserved for what the caller must act
// on: ctx ended (Run returns ctx.Err()), the endpoint kept failing or refused the request,
// a tool hit an infrastructure failure (a dead sandbox).
//
// # A fresh sandbox per run, from a pool
//
// An evaluation harness or a service runs many tasks, each in a sandbox of its own. Set
// [Agent.Sandboxes] to a [sandbox.Pool] instead of Tools: every Run takes a sandbox the pool
// started ahead of time (a channel receive and a ping, while the pool starts a replacement in
// the background), builds the run's tools on it with [Agent.ToolsFor] (the built-in tools by
// default), and closes it when it returns — or leaves it open in [Result.Sandbox] with
// [Agent.KeepSandbox], to grade what the run left. Neither the run's first model call nor its
// first tool call waits for a sandbox to be created, and concurrent Runs of one Agent each get
// their own sandbox:
//
//	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: 4})
//	...
//	defer pool.Close()
//	a := &agentloop.Agent{Client: client, Model: "gpt-4o-mini", Sandboxes: pool}
//	res, err := a.Run(ctx, task) // in a sandbox nobody had before
//
// # Retries
//
// Connection errors, streams cut or failed midway, and HTTP 408, 409, 429 and 5xx are retried
// with exponential backoff and jitter ([RetryPolicy]). A Retry-After (or retry-after-ms)
// header is honoured when the client was made by [NewClient], which is the only way to see
// the headers of a failed response through go-openai; with another client the loop falls
// back to its own backoff. A retried attempt's streamed text is void: a [Retry] event tells a
// UI to drop what it showed for that step.
//
// # Context window
//
// Before each model call the conversation's size is estimated — bytes/4 until the endpoint
// reports usage, then scaled by the prompt tokens it reported for the previous request.
// When the estimate nears [Agent.ContextWindow] (less room for the reply), the outputs of
// older tool calls are shortened, oldest first, to their start and end with a marker telling
// the model how to get them back; images of older calls are dropped the same way. The
// results of the latest turn are never shortened: the model asked for them. If the
// conversation still does not fit, the run stops with [StopContextFull] rather than send a
// request the endpoint would refuse.
//
// # Events and transcripts
//
// [Agent.OnEvent] receives a typed event for every step, text delta, tool call, tool result,
// retry and the end of the run, on Run's goroutine and in order. [Agent.Transcript] receives
// the run as JSON lines ([Record]): the model's turns exactly as received, tool results,
// retries and the outcome. [ReadTranscript] loads one and [ReplayClient] makes a go-openai
// client that answers with the recorded model turns instead of calling any API, so a run can
// be replayed offline against a real sandbox, whose tools really execute.
//
// # Cancellation
//
// Cancelling ctx aborts the model call in flight (the HTTP request is bound to ctx) and the
// running tool calls: they receive ctx, and the sandbox kills a command's process tree when
// its ctx ends.
//
// Threat model: the model's output is untrusted. Its tool calls go through the toolkit,
// which validates arguments against each tool's schema; what a tool may do is the sandbox's
// business, not this package's. The API key stays in the client: nothing here passes it to
// tools, writes it to transcripts or events.
package agentloop
