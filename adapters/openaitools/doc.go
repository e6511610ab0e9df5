// Package openaitools connects a [toolkit.Toolkit] to github.com/sashabaranov/go-openai. Its
// name differs from go-openai's (openai), so both import without an alias.
//
// Three pieces cover one function-calling turn:
//
//   - [Tools] declares the toolkit's tools in a ChatCompletionRequest, with strict mode on for
//     every tool whose schema allows it (the model then cannot produce arguments that miss a
//     field or add one).
//   - [Accumulator] rebuilds the assistant message from a streamed response: text, refusal,
//     and complete tool calls out of the fragments the API sends (see below).
//   - [Dispatch] runs the model's tool calls and returns the messages to append to the
//     conversation before asking the model again.
//
// A loop over them looks like this (openai is go-openai):
//
//	req := openai.ChatCompletionRequest{Model: model, Messages: msgs, Tools: openaitools.Tools(tk)}
//	for {
//		resp, err := client.CreateChatCompletion(ctx, req)
//		if err != nil { ... }
//		msg := resp.Choices[0].Message
//		req.Messages = append(req.Messages, msg)
//		if len(msg.ToolCalls) == 0 {
//			break // msg.Content is the answer
//		}
//		results, err := openaitools.Dispatch(ctx, tk, msg.ToolCalls)
//		if err != nil { ... } // the sandbox is gone or ctx is done; asking again cannot help
//		req.Messages = append(req.Messages, results...)
//	}
//
// # Order and concurrency of calls
//
// Dispatch returns one tool message per call, in the order of the calls, whatever order they
// finish in. Calls to tools marked [toolkit.ReadOnly] that stand next to each other in the list
// run concurrently, at most [MaxParallel] at a time (default 4). Any other call runs alone,
// after every call before it and before every call after it: a model that asks, in one turn,
// to write a file and then run it wrote them in an order that matters, and the sandbox must
// not race them. [AssumeIndependent] lifts that barrier for toolkits whose tools never affect
// each other.
//
// # Images
//
// A tool message carries text only; the API accepts images in user messages. So when results
// carry images (a plot from run_python, say), each such tool message says how many images
// belong to it, and Dispatch appends, after all the tool messages, one user message whose
// parts are a short text naming the call and the images as data: URLs (base64). Append every
// message Dispatch returns, in order: the tool messages must directly follow the assistant
// message, and the image message must come after them. Use a vision-capable model when tools
// produce images.
//
// # Streaming
//
// The API streams tool calls in pieces: the first delta of a call carries its index, id,
// type and function name with empty arguments; later deltas carry only the index and a
// fragment of the arguments; the fragments of parallel calls can interleave; with
// stream_options.include_usage the last chunk carries only usage, with empty choices; a
// refusal arrives in delta.refusal. [Accumulator] joins all of that by index, and
// [Accumulator.ReadAll] reports a stream that ended before its finish reason as an error
// instead of handing back half a tool call.
//
// Failures follow package toolkit's contract: anything the model can correct (an unknown
// tool, bad arguments, an error the tool returned) becomes the text of its tool message; only
// infrastructure failures (a dead sandbox, a cancelled context) are Go errors. Package
// openaitest is a scripted OpenAI-compatible server for testing code built on this package.
// examples/openai in this module is a complete program built on it, with a test that runs it
// against that server.
package openaitools
