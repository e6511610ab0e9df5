// Command langchaingo runs langchaingo's OpenAI functions agent with sandbox tools: the
// agent works on a task in a sandbox until it answers.
//
//	OPENAI_API_KEY=sk-... go run ./examples/langchaingo "Compute 2**100 with Python and save it to big.txt."
//
// It reads OPENAI_API_KEY (required), OPENAI_BASE_URL (optional: any OpenAI-compatible
// endpoint) and OPENAI_MODEL (optional, default gpt-4o-mini) from the environment. The key
// stays in this process: the sandbox gets a minimal environment of its own.
//
// adapters/langchaingo.Tools wraps each sandbox tool as a langchaingo tools.Tool. The agent
// declares every tool with one string argument, so each tool's description carries its real
// arguments, and a mistake in them comes back to the model as the observation (naming the bad
// argument) instead of stopping the executor.
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

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	lcopenai "github.com/tmc/langchaingo/llms/openai"
	"github.com/tmc/langchaingo/schema"

	"github.com/sandboxkit/sandboxkit/adapters/langchaingo"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

const defaultTask = "Here are temperature readings in degrees Celsius: 18.5, 21, 19.25, 23, 26.25. " +
	"Compute their mean and maximum with Python, and save a one-line summary to summary.txt."

func main() {
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	task := strings.Join(os.Args[1:], " ")
	if task == "" {
		task = defaultTask
	}
	if err := run(ctx, task, os.Stdout); err != nil {
		log.Fatal("langchaingo example: ", err)
	}
}

func run(ctx context.Context, task string, out io.Writer) error {
	key := os.Getenv("OPENAI_API_KEY")
	if key == "" {
		return errors.New("set OPENAI_API_KEY (and OPENAI_BASE_URL for an endpoint other than OpenAI's)")
	}
	opts := []lcopenai.Option{lcopenai.WithToken(key), lcopenai.WithModel("gpt-4o-mini")}
	if base := os.Getenv("OPENAI_BASE_URL"); base != "" {
		opts = append(opts, lcopenai.WithBaseURL(base))
	}
	if model := os.Getenv("OPENAI_MODEL"); model != "" {
		opts = append(opts, lcopenai.WithModel(model))
	}
	llm, err := lcopenai.New(opts...)
	if err != nil {
		return err
	}

	// The default sandbox: namespace isolation, no network, a temporary workspace.
	sb, err := sandbox.New(ctx)
	if err != nil {
		return fmt.Errorf("%w (run `sandboxkit doctor` to see what this machine supports)", err)
	}
	defer sb.Close()
	fmt.Fprintf(out, "sandbox %s, isolation: %s\n", sb.ID(), sb.Info().Isolation)

	// A few tools are enough for this agent; fewer tools also mean a shorter prompt.
	kit, err := toolkit.ForSandbox(sb).Subset("run_python", "run_command", "read_file", "write_file", "list_files")
	if err != nil {
		return err
	}
	agent := agents.NewOpenAIFunctionsAgent(llm, langchaingo.Tools(kit))
	executor := agents.NewExecutor(agent, agents.WithMaxIterations(12), agents.WithReturnIntermediateSteps())
	res, err := chains.Call(ctx, executor, map[string]any{"input": task})
	steps, _ := res["intermediateSteps"].([]schema.AgentStep)
	for _, s := range steps {
		fmt.Fprintf(out, "-> %s %s\n<- %s\n", s.Action.Tool, s.Action.ToolInput, indent(s.Observation))
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(out, res["output"])
	return nil
}

// indent keeps an observation readable in the log: at most 8 lines, indented under its arrow.
func indent(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 8 {
		lines = append(lines[:8], fmt.Sprintf("[%d more lines]", len(lines)-8))
	}
	return strings.Join(lines, "\n   ")
}
