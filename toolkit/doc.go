// Package toolkit turns typed Go functions into tools a model can call, and dispatches the
// calls.
//
// A tool is a name, a description written for the model, and a func(ctx, In) (Out, error).
// [New] derives the argument schema from In's struct tags (see package schemas), so nobody
// writes JSON Schema by hand. A [Toolkit] holds tools in registration order, lists them for an
// adapter (OpenAI, langchaingo, MCP), and runs [Toolkit.Call] with the raw arguments JSON a
// model produced.
//
// The split between the two kinds of failure is the contract adapters rely on:
//
//   - Anything the model can fix — an unknown tool name, malformed JSON, a wrong type, a
//     missing or extra argument, an error returned by the tool — is a [Result] with IsError
//     set and a Text saying what was wrong and what was expected. The agent loop sends it back
//     to the model and carries on.
//   - Infrastructure failures — the context is done, the sandbox is dead or closed (errors with
//     a Fatal() bool method returning true) — are Go errors from Call. Retrying the model
//     cannot help, so the loop should stop.
//
// Threat model: arguments come from a model and are untrusted. They are validated against the
// schema and decoded with unknown fields refused before the function runs, so a tool sees
// only well-typed input; it must still check meaning (paths, sizes) itself. Error texts quote
// what the model sent (shortened) and never include Go stack traces.
//
// [Render] and friends format tool output the same compact way for every tool (exit code,
// stdout/stderr sections, truncation markers that say how to get the rest), so a model learns
// one layout.
package toolkit
