// Package langchaingo connects a [toolkit.Toolkit] to github.com/tmc/langchaingo, in the two
// ways langchaingo calls tools.
//
// # Agents: Tools
//
// [Tools] wraps each tool as a langchaingo tools.Tool for agents and executors:
//
//	agent := agents.NewOpenAIFunctionsAgent(llm, langchaingo.Tools(tk))
//	out, err := chains.Run(ctx, agents.NewExecutor(agent), "plot sin(x) and save it")
//
// A tools.Tool has a name, a description and Call(ctx, string), and no schema: the OpenAI
// functions agent declares every tool to the model with a single string argument, __arg1.
// So the description carries a compact schema of the real arguments (field names, types,
// which are required, enums, field descriptions), and Call accepts what models then send: a
// JSON object; a string wrapping one (the content of __arg1, or an object {"__arg1": "..."}
// that reached Call whole); and, for a tool with exactly one required string argument, the
// bare value of that argument (run_python's code, say).
//
// Whatever the model got wrong — unparsable input, a missing field, an unknown tool, an error
// inside the tool — comes back from Call as the observation text with a nil error, because a
// Go error from Call aborts langchaingo's executor and the model never gets to correct
// itself. Only infrastructure failures (the sandbox died, ctx is done) are returned as errors:
// then stopping the agent is the right outcome. Images a tool produces cannot travel in an
// observation string; the observation says they were left out.
//
// # Direct function calling: Definitions and Dispatch
//
// With llms.WithTools the model sees the real schemas, not __arg1, in strict mode where the
// schema allows it (as package openaitools declares them; [NotStrict] for providers that do not
// understand strict mode):
//
//	resp, err := llm.GenerateContent(ctx, msgs, llms.WithTools(langchaingo.Definitions(tk)))
//	choice := resp.Choices[0]
//	msgs = append(msgs, langchaingo.AssistantMessage(choice))
//	results, err := langchaingo.Dispatch(ctx, tk, choice.ToolCalls)
//	msgs = append(msgs, results...)
//
// [Dispatch] answers each call with one role-tool message holding one ToolCallResponse part
// (langchaingo's OpenAI provider refuses tool messages with more than one part). Images go
// after the tool messages in one human message, as data: URLs, since tool messages carry
// text only. Calls run one after another, in order.
//
// A caution on streaming (llms.WithStreamingFunc): langchaingo v0.1.14's OpenAI stream
// reader appends every argument fragment to the most recent tool call, ignoring the index.
// It rebuilds parallel calls correctly only when the server sends them one after another, as
// OpenAI does; a server that interleaves their fragments gets them mixed up. Without a
// streaming function, responses arrive whole and the problem does not arise. The OpenAI
// functions agent streams only when it has a callbacks handler.
//
// examples/langchaingo in this module is a complete agent program built on [Tools], and its
// test runs it against the scripted server of package adapters/openaitools/openaitest, which
// works as the endpoint of langchaingo's OpenAI LLM (openai.WithBaseURL(srv.URL)) too.
package langchaingo
