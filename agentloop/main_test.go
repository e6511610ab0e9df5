package agentloop_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/agentloop"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

func TestMain(m *testing.M) {
	// The local backend keeps one launcher goroutine for the life of the process, by design
	// (its locked thread must outlive every sandbox it starts).
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/sandboxkit/sandboxkit/sandbox/local/isolate.OnLauncherThread.func1.1"))
}

// newAgent returns an agent talking to srv with fast retries, recording its events.
func newAgent(srv *openaitest.Server, tk *toolkit.Toolkit) (*agentloop.Agent, *eventLog) {
	cfg := goopenai.DefaultConfig(openaitest.APIKey)
	cfg.BaseURL = srv.URL
	log := &eventLog{}
	return &agentloop.Agent{
		Client:  agentloop.NewClient(cfg),
		Model:   "test-model",
		System:  "You are a test.",
		Tools:   tk,
		Retry:   agentloop.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
		OnEvent: log.add,
	}, log
}

// eventLog keeps the events of a run. OnEvent runs on Run's goroutine, so no lock is needed
// for reading after Run returns.
type eventLog struct {
	events []agentloop.Event
}

func (l *eventLog) add(e agentloop.Event) { l.events = append(l.events, e) }

// text joins the text deltas of the step.
func (l *eventLog) text(step int) string {
	var s string
	for _, e := range l.events {
		if d, ok := e.(agentloop.TextDelta); ok && d.Step == step {
			s += d.Text
		}
	}
	return s
}

func (l *eventLog) results() []agentloop.ToolResult {
	var out []agentloop.ToolResult
	for _, e := range l.events {
		if r, ok := e.(agentloop.ToolResult); ok {
			out = append(out, r)
		}
	}
	return out
}

func (l *eventLog) retries() []agentloop.Retry {
	var out []agentloop.Retry
	for _, e := range l.events {
		if r, ok := e.(agentloop.Retry); ok {
			out = append(out, r)
		}
	}
	return out
}

type addIn struct {
	A int `json:"a" description:"first addend"`
	B int `json:"b" description:"second addend"`
}

type sum int

func (s sum) ToolText() string { return strconv.Itoa(int(s)) }

// adder returns a toolkit with one read-only tool, add, and the number of times it ran.
func adder() (*toolkit.Toolkit, *atomic.Int32) {
	var calls atomic.Int32
	add := toolkit.New("add", "Adds two integers.", func(ctx context.Context, in addIn) (sum, error) {
		calls.Add(1)
		return sum(in.A + in.B), nil
	}, toolkit.ReadOnly())
	return toolkit.Of(add), &calls
}
