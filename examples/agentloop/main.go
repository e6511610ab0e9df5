// Command agentloop is the example agent: a model with a sandbox, in a terminal.
//
//	go run ./examples/agentloop [flags] "task"
//	go run ./examples/agentloop --replay examples/agentloop/demo.jsonl
//
// It gives the task to a model on any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM,
// LM Studio, OpenRouter: set --base-url or OPENAI_BASE_URL), hands it the built-in sandbox
// tools (toolkit.ForSandbox), and prints a live trace: each step, each tool call with its
// arguments, a short result, the answer, and the tokens and time used. --transcript records
// the run; --replay feeds the model's turns back from a recording, with no key and no
// network, while the tools really run in a real sandbox. A replayed tool result that differs
// from the recorded one is flagged in the trace, since the recorded turns that follow were
// written for the recorded result.
//
// --deny-command and --ask-command (repeatable) and --policy FILE set a tool-call policy
// (toolkit.Policy): a refused call is answered to the model with the rule that refused it,
// and a call the policy asks about is put to the person at the terminal, with the commands
// it runs as the policy parsed them: allow once, always (the same rule for the rest of the
// run), or deny. Without a terminal on stdin nobody can answer, and such calls are refused.
//
// Exit status: 0 when the model answered, 3 when the run stopped at a limit (steps, tokens,
// context window) or the model refused, 4 when a replay ran to its end but some tool results
// differed from the recording, 130 when interrupted, 2 for bad flags, 1 for other failures.
//
// The sandbox gets the namespace tier (or a container with docker://) or is not created;
// --allow-weaker accepts a weaker tier by name on machines without user namespaces. The API
// key stays in this process; the sandbox's environment never contains it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/agentloop"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/docker"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// systemPrompt is what the model is told about its situation unless --system says otherwise.
const systemPrompt = `You are a careful engineer working in a sandboxed Linux workspace through tools.
Work in small steps: run code to check facts instead of guessing, read errors and fix them.
Files you create stay in the workspace (the current directory of every command).
When the task is done, answer briefly: what you did, the key results, and the files you made.`

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitStopped     = 3
	exitDiverged    = 4
	exitInterrupted = 130
)

type options struct {
	model, baseURL, apiKey string
	backend, allowWeaker   string
	workspace              string
	system                 string
	transcript, replay     string
	maxSteps, maxTokens    int
	contextWindow          int
	color                  string
	policy                 policyFlags
	domains                domains
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("agentloop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.model, "model", envOr("OPENAI_MODEL", "gpt-4o-mini"), "model name (env OPENAI_MODEL)")
	fs.StringVar(&o.baseURL, "base-url", envOr("OPENAI_BASE_URL", "https://api.openai.com/v1"), "OpenAI-compatible API base URL, e.g. http://localhost:11434/v1 for Ollama (env OPENAI_BASE_URL)")
	fs.StringVar(&o.apiKey, "api-key", "", "API key (default: env OPENAI_API_KEY; local servers need none)")
	fs.StringVar(&o.backend, "backend", "local", `sandbox backend: "local" or "docker://IMAGE"`)
	fs.StringVar(&o.allowWeaker, "allow-weaker", "", `weaker isolation tiers to accept when the namespace tier is unavailable: "landlock", "process" or "landlock,process"`)
	fs.Var(&o.domains, "allow-domain", "let the sandbox reach `NAME` over HTTP/HTTPS through a proxy the host runs (repeatable; NAME, *.DOMAIN, NAME:PORT); nothing else is reachable. Needs the namespace tier or Docker")
	fs.StringVar(&o.workspace, "workspace", "", "host directory to use as the workspace (created if missing; default: a new temporary directory, kept)")
	fs.StringVar(&o.system, "system", "", "system prompt (default: a short built-in one; with --replay: the recorded one)")
	fs.StringVar(&o.transcript, "transcript", "", "write the run to this JSONL file")
	fs.StringVar(&o.replay, "replay", "", "replay the model's turns from this transcript instead of calling an API (tools really run)")
	fs.IntVar(&o.maxSteps, "max-steps", agentloop.DefaultMaxSteps, "most model calls in the run")
	fs.IntVar(&o.maxTokens, "max-tokens", 0, "token budget for the run, prompt and completion together (0: none)")
	fs.IntVar(&o.contextWindow, "context-window", 128000, "the model's context window in tokens; old tool outputs are shortened to stay inside it")
	fs.StringVar(&o.color, "color", "auto", `colour the trace: "auto" (on a terminal, unless NO_COLOR is set), "always" or "never"`)
	fs.StringVar(&o.policy.file, "policy", "", "decide tool calls by the rules in this YAML or JSON file; calls it asks about are asked on the terminal")
	fs.Var(&o.policy.deny, "deny-command", "refuse every run of this command `pattern` (e.g. rm, \"git push\"; repeatable)")
	fs.Var(&o.policy.ask, "ask-command", "ask on the terminal before running this command `pattern` (e.g. \"pip install *\"; repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: agentloop [flags] \"task\"\n       agentloop --replay FILE\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if o.color != "auto" && o.color != "always" && o.color != "never" {
		fmt.Fprintf(stderr, "agentloop: --color %q: want auto, always or never\n", o.color)
		return exitUsage
	}
	if o.apiKey == "" {
		o.apiKey = os.Getenv("OPENAI_API_KEY")
	}
	task := strings.Join(fs.Args(), " ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tr := newTracer(stdout, useColor(o.color, stdout))
	code, err := agent(ctx, o, task, tr)
	if err != nil {
		fmt.Fprintf(stderr, "agentloop: %v\n", err)
	}
	return code
}

// agent sets up the model, the sandbox and the loop, runs the task, and returns the exit
// status.
func agent(ctx context.Context, o options, task string, tr *tracer) (int, error) {
	a := &agentloop.Agent{
		Model:         o.model,
		System:        systemPrompt,
		MaxSteps:      o.maxSteps,
		MaxTokens:     o.maxTokens,
		ContextWindow: o.contextWindow,
		OnEvent:       tr.event,
	}
	if o.system != "" {
		a.System = o.system
	}
	endpoint := o.baseURL
	var rt *agentloop.Transcript
	if o.replay != "" {
		var err error
		rt, err = readTranscript(o.replay)
		if err != nil {
			return exitFailed, err
		}
		start := rt.Start()
		if task != "" && task != start.Task {
			return exitUsage, errors.New("--replay replays the recorded task; leave the task argument out (the recorded model turns answer only that task)")
		}
		task, a.Model, a.Client = start.Task, start.Model, agentloop.ReplayClient(rt)
		if o.system == "" {
			a.System = start.System
		}
		endpoint = "replay of " + o.replay + " (no network, no key)"
		tr.compareWith(rt)
	} else {
		if task == "" {
			return exitUsage, errors.New(`no task given: agentloop [flags] "task" (or --replay FILE; see -h)`)
		}
		u, err := url.Parse(o.baseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return exitUsage, fmt.Errorf("--base-url %q is not an http(s) URL such as https://api.openai.com/v1", o.baseURL)
		}
		key := o.apiKey
		if key == "" {
			if u.Hostname() == "api.openai.com" {
				return exitUsage, errors.New("no API key: set OPENAI_API_KEY or --api-key (or --replay a transcript to run without one)")
			}
			key = "none" // Ollama, vLLM and LM Studio ignore it by default
		}
		cfg := goopenai.DefaultConfig(key)
		cfg.BaseURL = strings.TrimRight(o.baseURL, "/")
		a.Client = agentloop.NewClient(cfg)
	}
	opts, closeBackend, err := sandboxOptions(o)
	if err != nil {
		return exitUsage, err
	}
	policy, err := o.policy.policy(newTerminalApprover(os.Stdin, tr).ask)
	if err != nil {
		closeBackend()
		return exitUsage, err
	}
	defer closeBackend()
	var transcript *os.File
	if o.transcript != "" {
		// Opened before the sandbox so that a bad path costs nothing.
		if transcript, err = os.Create(o.transcript); err != nil {
			return exitFailed, fmt.Errorf("--transcript: %w", err)
		}
		defer transcript.Close()
		a.Transcript = transcript
	}

	sb, err := sandbox.New(ctx, opts...)
	if err != nil {
		if sandbox.CodeOf(err) == "SBX_ISOLATION_UNAVAILABLE" {
			err = fmt.Errorf("%w\n(this program accepts a weaker tier by name: --allow-weaker landlock,process)", err)
		}
		return exitFailed, fmt.Errorf("creating the sandbox: %w", err)
	}
	defer sb.Close()
	ws := sb.Info().HostWorkspace
	a.Tools = toolkit.ForSandbox(sb)
	a.Tools.SetPolicy(policy)
	if rt != nil {
		if missing := missingTools(a.Tools, rt); missing != "" {
			tr.warn(missing)
		}
	}

	tr.header(sb.Info(), ws, a.Model, endpoint, task)
	res, err := a.Run(ctx, task)
	tr.files(ws)
	tr.replaySummary()
	if transcript != nil {
		if cerr := transcript.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("--transcript: %w", cerr)
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return exitInterrupted, nil // the trace said so
	case err != nil:
		return exitFailed, err
	case res.Reason != agentloop.StopAnswered:
		return exitStopped, nil
	case tr.diverged() > 0:
		return exitDiverged, nil // the trace said which results differ
	}
	return exitOK, nil
}

func readTranscript(path string) (*agentloop.Transcript, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--replay: %w", err)
	}
	defer f.Close()
	return agentloop.ReadTranscript(f)
}

// missingTools warns when the recording calls tools this build does not offer: the replay
// still runs, and the model's recorded turns get "unknown tool" results.
func missingTools(tk *toolkit.Toolkit, rt *agentloop.Transcript) string {
	var missing []string
	for _, t := range rt.Turns() {
		for _, c := range t.Message.ToolCalls {
			if _, ok := tk.Lookup(c.Function.Name); !ok && !slices.Contains(missing, c.Function.Name) {
				missing = append(missing, c.Function.Name)
			}
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("the recording calls tools this build lacks (%s); those calls will fail", strings.Join(missing, ", "))
}

// sandboxOptions turns the backend, workspace and isolation flags into sandbox options.
// closeBackend releases the backend's resources (the Docker client) after the sandbox is
// closed.
func sandboxOptions(o options) (opts []sandbox.Option, closeBackend func(), err error) {
	closeBackend = func() {}
	opts = append([]sandbox.Option{sandbox.WithOwner("examples/agentloop")}, o.domains.option()...)
	for _, name := range strings.Split(o.allowWeaker, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		t, ok := driver.ParseTier(name)
		if !ok || t >= sandbox.TierNamespace || t == sandbox.TierNone {
			return nil, nil, fmt.Errorf("--allow-weaker: %q is not a tier weaker than namespace (use landlock, process, or landlock,process)", name)
		}
		opts = append(opts, sandbox.AllowWeaker(t))
	}
	ws := o.workspace
	if ws == "" && o.backend == "local" {
		// A workspace of our own, kept after the run (unlike the sandbox's default temporary
		// one) so that the user can open what the agent made.
		if ws, err = os.MkdirTemp("", "agentloop-"); err != nil {
			return nil, nil, err
		}
	}
	if ws != "" {
		if ws, err = filepath.Abs(ws); err != nil {
			return nil, nil, fmt.Errorf("--workspace: %w", err)
		}
		if err := os.MkdirAll(ws, 0o755); err != nil {
			return nil, nil, fmt.Errorf("--workspace: %w", err)
		}
		opts = append(opts, sandbox.WithWorkspace(ws))
	}
	switch {
	case o.backend == "local":
	case strings.HasPrefix(o.backend, "docker://"):
		image := strings.TrimPrefix(o.backend, "docker://")
		if image == "" {
			return nil, nil, errors.New(`--backend docker:// needs an image, e.g. docker://python:3.12-slim`)
		}
		d := docker.New(docker.WithImage(image))
		opts = append(opts, sandbox.WithDriver(d))
		closeBackend = func() { d.Close() }
	default:
		return nil, nil, fmt.Errorf(`--backend %q: want "local" or "docker://IMAGE"`, o.backend)
	}
	return opts, closeBackend, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
