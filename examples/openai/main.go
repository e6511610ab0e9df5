// Command openai gives a model the sandbox's built-in tools through
// github.com/sashabaranov/go-openai and lets it work on a task until it answers.
//
//	OPENAI_API_KEY=sk-... go run ./examples/openai "Which primes are below 100? Save them to primes.txt."
//
// It reads OPENAI_API_KEY (required), OPENAI_BASE_URL (optional: any OpenAI-compatible
// endpoint, e.g. a local server at http://127.0.0.1:8000/v1) and OPENAI_MODEL (optional,
// default gpt-4o-mini) from the environment. The key stays in this process: the sandbox gets
// a minimal environment of its own, not this one.
//
// Each turn is streamed; adapters/openaitools's Accumulator rebuilds the tool calls from the
// fragments, and Dispatch runs them in the sandbox and returns the messages to send back.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"

	"github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

const defaultTask = "Which primes are below 100? Save them to primes.txt, one per line, and tell me how many there are and their sum."

// maxTurns stops a model that never stops calling tools.
const maxTurns = 12

func main() {
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	task := strings.Join(os.Args[1:], " ")
	if task == "" {
		task = defaultTask
	}
	if err := run(ctx, task, os.Stdout); err != nil {
		log.Fatal("openai example: ", err)
	}
}

func run(ctx context.Context, task string, out io.Writer) error {
	key := os.Getenv("OPENAI_API_KEY")
	if key == "" {
		return errors.New("set OPENAI_API_KEY (and OPENAI_BASE_URL for an endpoint other than OpenAI's)")
	}
	cfg := openai.DefaultConfig(key)
	if base := os.Getenv("OPENAI_BASE_URL"); base != "" {
		cfg.BaseURL = base
	}
	model := os.Getenv("OPENAI_MODEL")
	if model == "" {
		model = "gpt-4o-mini"
	}
	client := openai.NewClientWithConfig(cfg)

	// The default sandbox: namespace isolation, no network, a temporary workspace.
	sb, err := sandbox.New(ctx)
	if err != nil {
		return fmt.Errorf("%w (run `sandboxkit doctor` to see what this machine supports)", err)
	}
	defer sb.Close()
	fmt.Fprintf(out, "sandbox %s, isolation: %s\n", sb.ID(), sb.Info().Isolation)
	tk := toolkit.ForSandbox(sb)

	req := openai.ChatCompletionRequest{
		Model: model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You work in a Linux sandbox through the tools given. Use them to do the task, then answer briefly."},
			{Role: openai.ChatMessageRoleUser, Content: task},
		},
		Tools: openaitools.Tools(tk),
	}
	for turn := 0; turn < maxTurns; turn++ {
		msg, err := ask(ctx, client, req, out)
		if err != nil {
			return err
		}
		req.Messages = append(req.Messages, msg)
		if msg.Refusal != "" {
			return fmt.Errorf("the model declined: %s", msg.Refusal)
		}
		if len(msg.ToolCalls) == 0 {
			return nil // the answer was printed as it streamed
		}
		for _, c := range msg.ToolCalls {
			fmt.Fprintf(out, "-> %s %s\n", c.Function.Name, c.Function.Arguments)
		}
		results, err := openaitools.Dispatch(ctx, tk, msg.ToolCalls)
		if err != nil {
			return err // the sandbox is gone or ctx is done: asking the model again cannot help
		}
		for _, r := range results {
			if r.Role == openai.ChatMessageRoleTool {
				fmt.Fprintf(out, "<- %s\n", indent(r.Content))
			}
		}
		req.Messages = append(req.Messages, results...)
	}
	return fmt.Errorf("no answer after %d turns", maxTurns)
}

// ask streams one turn, printing the text as it arrives, and returns the whole assistant
// message.
func ask(ctx context.Context, client *openai.Client, req openai.ChatCompletionRequest, out io.Writer) (openai.ChatCompletionMessage, error) {
	stream, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return openai.ChatCompletionMessage{}, err
	}
	defer stream.Close()
	var acc openaitools.Accumulator
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return openai.ChatCompletionMessage{}, err
		}
		if err := acc.Add(chunk); err != nil {
			return openai.ChatCompletionMessage{}, err
		}
		for _, c := range chunk.Choices {
			fmt.Fprint(out, c.Delta.Content)
		}
	}
	if acc.Text() != "" {
		fmt.Fprintln(out)
	}
	switch acc.FinishReason() {
	case "":
		return openai.ChatCompletionMessage{}, errors.New("the stream ended before the message did")
	case openai.FinishReasonLength:
		return openai.ChatCompletionMessage{}, errors.New("the reply hit the token limit")
	}
	return acc.Message(), nil
}

// indent keeps a tool result readable in the log: at most 8 lines, indented under its arrow.
func indent(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 8 {
		lines = append(lines[:8], fmt.Sprintf("[%d more lines]", len(lines)-8))
	}
	return strings.Join(lines, "\n   ")
}
