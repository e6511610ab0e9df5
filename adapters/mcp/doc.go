// Package mcp serves a toolkit over the Model Context Protocol with
// github.com/modelcontextprotocol/go-sdk, so that any MCP client (Claude
// Desktop, Cursor, VS Code, an agent of your own) can use sandboxkit's tools.
//
// One sandbox per client session: [NewServer] takes a factory instead of a
// toolkit, and calls it the first time a session lists or calls tools. The
// toolkit (and the sandbox behind it) belongs to that session alone and is
// released when the session ends: the stdio client closes its pipe, the
// HTTP client sends DELETE, the idle timeout of [HTTPOptions] fires, or
// [Server.Close] runs. Calls still running then are cancelled first, so
// that a session's end never waits on them. Two clients never see each
// other's files or processes.
//
// What a client gets, mapped from package toolkit:
//
//   - tools/list: each tool with its name, description, argument JSON Schema
//     ([toolkit.Tool.Schema]) and annotations: readOnlyHint from
//     [toolkit.ReadOnly], destructiveHint from [toolkit.Destructive],
//     openWorldHint false when [Options.ClosedWorld] says the sandbox has no
//     network. A tool not marked either way gets no destructiveHint, which
//     MCP reads as "may be destructive": the safe default for tools that run
//     arbitrary code.
//   - tools/call: the result's text as text content and its images as image
//     content. Everything the model can correct (an unknown tool, bad
//     arguments, a failing tool) is a result with isError set, never a
//     protocol error, so the model reads it and tries again.
//   - progress: when the client sends a progress token with a call, the
//     server sends a notifications/progress every [Options.ProgressInterval]
//     while the call runs, so that clients keep waiting on long commands and
//     can show that something is happening.
//
// Over stdio, serve with [StdioTransport] (or a [LineTransport] on any
// reader and writer), not the go-sdk's own stdio transport: a malformed
// line (garbage, truncated or invalid UTF-8 JSON, a batch array, a wrong
// "jsonrpc" version, an id of the wrong type) is answered with the JSON-RPC
// error for it (-32700 parse error, -32600 invalid request) and logged,
// and the session and its sandbox carry on; the SDK's transport ended the
// session instead. A request the client cancelled gets no reply, and no
// error reply carries code 0.
//
// In one process (an agent of your own on the go-sdk's client), connect
// with [NewInProcessTransports] rather than the go-sdk's in-memory
// transport: messages cross as Go values, copied, instead of JSON lines
// through a pipe, which halves what a call allocates (see
// [InProcessTransport]).
//
// Infrastructure failures are handled per session: when the sandbox dies or
// is closed under a session (a toolkit error with Fatal() true), the call
// returns an isError result saying that the sandbox was lost, the session's
// toolkit is released, and the next call gets a fresh one. A cancelled call
// returns the cancellation as a protocol error, as the MCP spec expects.
//
// Threat model: the client is trusted to use the tools, not to configure
// them. Nothing in the protocol reaches the factory: security settings
// (network, workspace, isolation tier, limits) are fixed by the program
// that builds the factory, and a client can only call the tools it was
// given. Tool arguments are untrusted and are validated by package toolkit
// before any tool runs. The HTTP handler is stateful only (a stateless
// handler would create a sandbox per request) and keeps the SDK's DNS
// rebinding protection for localhost listeners.
package mcp
