package agentloop_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/agentloop"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

func TestRunMultiStepTask(t *testing.T) {
	tk, calls := adder()
	srv := openaitest.New(t,
		openaitest.Reply{
			Text: "Let me add both pairs.",
			ToolCalls: []openaitest.ToolCall{
				{Name: "add", Arguments: `{"a":1,"b":2}`},
				{Name: "add", Arguments: `{"a":3,"b":4}`},
			},
			Usage: &openaitest.Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120},
		},
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			res := req.ToolResults()
			if res["call_1_0"] != "3" || res["call_1_1"] != "7" {
				t.Errorf("step 2 got tool results %v, want call_1_0=3 call_1_1=7", res)
			}
			return openaitest.Reply{
				ToolCalls: []openaitest.ToolCall{{Name: "add", Arguments: `{"a":3,"b":7}`}},
				Usage:     &openaitest.Usage{PromptTokens: 150, CompletionTokens: 10, TotalTokens: 160},
			}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := req.ToolResults()["call_2_0"]; got != "10" {
				t.Errorf("step 3 got tool result %q, want 10", got)
			}
			return openaitest.Reply{Text: "The total is 10.", Usage: &openaitest.Usage{PromptTokens: 180, CompletionTokens: 6, TotalTokens: 186}}
		}),
	)
	a, log := newAgent(srv, tk)
	var transcript bytes.Buffer
	a.Transcript = &transcript

	res, err := a.Run(context.Background(), "Add 1+2 and 3+4, then add the results.")
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != agentloop.StopAnswered || res.Answer != "The total is 10." {
		t.Errorf("run ended with %s %q, want answered %q", res.Reason, res.Answer, "The total is 10.")
	}
	if res.Steps != 3 || res.ToolCalls != 3 || calls.Load() != 3 {
		t.Errorf("steps %d, tool calls %d (tool ran %d times), want 3, 3, 3", res.Steps, res.ToolCalls, calls.Load())
	}
	want := agentloop.Usage{PromptTokens: 430, CompletionTokens: 36, TotalTokens: 466}
	if res.Usage != want {
		t.Errorf("usage %+v, want %+v", res.Usage, want)
	}
	if got := log.text(1); got != "Let me add both pairs." {
		t.Errorf("step 1 streamed %q", got)
	}
	if got := log.text(3); got != res.Answer {
		t.Errorf("step 3 streamed %q, the answer is %q", got, res.Answer)
	}
	// The event stream tells the whole story in order.
	var kinds []string
	for _, e := range log.events {
		switch e := e.(type) {
		case agentloop.StepStarted:
			kinds = append(kinds, fmt.Sprintf("step %d", e.Step))
		case agentloop.ToolCall:
			kinds = append(kinds, "call "+e.Arguments)
		case agentloop.ToolResult:
			kinds = append(kinds, "result "+e.Content)
		case agentloop.Finished:
			kinds = append(kinds, "finished "+string(e.Result.Reason))
		}
	}
	wantKinds := []string{
		"step 1", `call {"a":1,"b":2}`, `call {"a":3,"b":4}`, "result 3", "result 7",
		"step 2", `call {"a":3,"b":7}`, "result 10",
		"step 3", "finished answered",
	}
	if strings.Join(kinds, "\n") != strings.Join(wantKinds, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(kinds, "\n"), strings.Join(wantKinds, "\n"))
	}

	// The transcript holds every turn and result, and the outcome.
	tr, err := agentloop.ReadTranscript(&transcript)
	if err != nil {
		t.Fatal(err)
	}
	if s := tr.Start(); s.Task != "Add 1+2 and 3+4, then add the results." || s.Model != "test-model" || len(s.Tools) != 1 {
		t.Errorf("start record %+v", s)
	}
	if n := len(tr.Turns()); n != 3 {
		t.Errorf("transcript has %d turns, want 3", n)
	}
	end := tr.Records[len(tr.Records)-1]
	if end.Kind != agentloop.KindEnd || end.Answer != res.Answer || end.Usage == nil || end.Usage.TotalTokens != 466 {
		t.Errorf("end record %+v", end)
	}
}

func TestReplayRunsTheRecordedTurnsAgainstRealTools(t *testing.T) {
	tk, _ := adder()
	srv := openaitest.New(t,
		openaitest.Call("add", `{"a":20,"b":22}`),
		openaitest.Text("It is 42."),
	)
	a, _ := newAgent(srv, tk)
	var transcript bytes.Buffer
	a.Transcript = &transcript
	if _, err := a.Run(context.Background(), "What is 20+22?"); err != nil {
		t.Fatal(err)
	}
	tr, err := agentloop.ReadTranscript(&transcript)
	if err != nil {
		t.Fatal(err)
	}

	// No server now: only the replay client, and tools that really run.
	tk2, calls := adder()
	replay, log := &agentloop.Agent{Client: agentloop.ReplayClient(tr), Model: tr.Start().Model, Tools: tk2}, &eventLog{}
	replay.OnEvent = log.add
	res, err := replay.Run(context.Background(), tr.Start().Task)
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "It is 42." || calls.Load() != 1 {
		t.Errorf("replay answered %q after %d tool runs, want %q after 1", res.Answer, calls.Load(), "It is 42.")
	}
	if r := log.results(); len(r) != 1 || r[0].Content != "42" {
		t.Errorf("replayed tool results %+v, want one real result 42", r)
	}
	if log.text(2) != "It is 42." {
		t.Errorf("replay streamed %q", log.text(2))
	}
	if res.Usage.Estimated || res.Usage.TotalTokens == 0 {
		t.Errorf("replay usage %+v, want the recorded usage", res.Usage)
	}

	// A replay that goes further than the recording stops with a clear error.
	short := &agentloop.Transcript{Records: tr.Records[:2]} // start and the first turn
	replay.Client = agentloop.ReplayClient(short)
	_, err = replay.Run(context.Background(), tr.Start().Task)
	if err == nil || !strings.Contains(err.Error(), "no more model turns") {
		t.Errorf("replay past the recording: err = %v, want one saying the transcript ran out", err)
	}
}

func TestRetries(t *testing.T) {
	answer := openaitest.Text("done")
	secondsOnly := openaitest.Reply{Status: 429, Error: &openaitest.APIError{Message: "slow down", Type: "requests"},
		Header: http.Header{"Retry-After": {"1"}}} // what most servers other than OpenAI send
	tests := []struct {
		name    string
		script  []openaitest.Step
		retries int
		// wait is the wait before the first retry when the server dictates it.
		wait time.Duration
		// midStream says the failed attempt streamed text before failing.
		midStream bool
	}{
		{name: "429 then success honours retry-after-ms", script: []openaitest.Step{openaitest.RateLimited(40 * time.Millisecond), answer}, retries: 1, wait: 40 * time.Millisecond},
		{name: "429 then success honours Retry-After in seconds", script: []openaitest.Step{secondsOnly, answer}, retries: 1, wait: time.Second},
		{name: "500 then success", script: []openaitest.Step{openaitest.Fail(500, "boom"), answer}, retries: 1},
		{name: "503 twice then success", script: []openaitest.Step{openaitest.Fail(503, "busy"), openaitest.Fail(503, "busy"), answer}, retries: 2},
		{name: "408 then success", script: []openaitest.Step{openaitest.Fail(408, "slow"), answer}, retries: 1},
		{name: "409 then success", script: []openaitest.Step{openaitest.Fail(409, "conflict"), answer}, retries: 1},
		{name: "500 mid-stream then success", script: []openaitest.Step{openaitest.Reply{Text: "partial answer that fails", ErrorAfter: 3}, answer}, retries: 1, midStream: true},
		{name: "connection cut mid-stream then success", script: []openaitest.Step{openaitest.Reply{Text: "partial answer that is cut", DropAfter: 3}, answer}, retries: 1, midStream: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Note when each request reaches the server, to see the wait between them.
			var arrived []time.Time
			script := make([]openaitest.Step, len(tt.script))
			for i, step := range tt.script {
				script[i] = openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
					arrived = append(arrived, time.Now())
					return step.Respond(req)
				})
			}
			srv := openaitest.New(t, script...)
			a, log := newAgent(srv, toolkit.Of())
			res, err := a.Run(context.Background(), "go")
			if err != nil {
				t.Fatal(err)
			}
			if res.Answer != "done" || res.Retries != tt.retries || len(arrived) != tt.retries+1 {
				t.Errorf("answer %q after %d retries and %d requests, want %q after %d and %d", res.Answer, res.Retries, len(arrived), "done", tt.retries, tt.retries+1)
			}
			retries := log.retries()
			if len(retries) != tt.retries {
				t.Fatalf("%d retry events, want %d", len(retries), tt.retries)
			}
			if tt.wait > 0 {
				if retries[0].Wait != tt.wait {
					t.Errorf("planned a wait of %v, want the server's %v", retries[0].Wait, tt.wait)
				}
				// The loop really waited before asking again (a lower bound: never flaky).
				if gap := arrived[1].Sub(arrived[0]); gap < tt.wait {
					t.Errorf("the retry came %v after the 429, before the %v the server asked for", gap, tt.wait)
				}
			}
			if tt.midStream {
				// Text of the failed attempt streamed before its Retry event: the failure came
				// mid-answer, and the UI was told to drop that text.
				var before string
				for _, e := range log.events {
					if _, ok := e.(agentloop.Retry); ok {
						break
					}
					if d, ok := e.(agentloop.TextDelta); ok {
						before += d.Text
					}
				}
				if before == "" || !strings.HasPrefix("partial answer that", before[:min(len(before), 19)]) {
					t.Errorf("before the retry the stream showed %q, want the start of the failed answer", before)
				}
				if got := log.text(1); !strings.HasSuffix(got, "done") {
					t.Errorf("step 1 streamed %q, want it to end with the retried answer", got)
				}
			}
		})
	}
}

func TestErrorsThatAreNotRetried(t *testing.T) {
	tests := []struct {
		name   string
		script []openaitest.Step
		policy agentloop.RetryPolicy
		want   string
	}{
		{"400 fails at once", []openaitest.Step{openaitest.Fail(400, "bad request: no such model")}, agentloop.RetryPolicy{}, "no such model"},
		{"401 fails at once", []openaitest.Step{openaitest.Fail(401, "invalid api key")}, agentloop.RetryPolicy{}, "invalid api key"},
		{"retries run out", []openaitest.Step{openaitest.Fail(500, "down"), openaitest.Fail(500, "down"), openaitest.Fail(500, "down")},
			agentloop.RetryPolicy{MaxRetries: 2, BaseDelay: time.Millisecond}, "after 3 attempts"},
		{"a Retry-After beyond the limit is not waited for", []openaitest.Step{openaitest.RateLimited(10 * time.Minute)},
			agentloop.RetryPolicy{MaxRetryAfter: time.Second}, "asks to retry after 10m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t, tt.script...)
			a, _ := newAgent(srv, toolkit.Of())
			a.Retry = tt.policy
			res, err := a.Run(context.Background(), "go")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			if res.Reason != agentloop.StopError {
				t.Errorf("reason %s, want %s", res.Reason, agentloop.StopError)
			}
		})
	}
}

func TestMalformedToolArgumentsAreCorrectedByTheModel(t *testing.T) {
	tk, calls := adder()
	srv := openaitest.New(t,
		openaitest.Call("add", `{"a": 1, "b": `),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			got := req.ToolResults()["call_1_0"]
			if !strings.Contains(got, "invalid arguments for add") {
				t.Errorf("the model was told %q, want an explanation of the bad arguments", got)
			}
			return openaitest.Call("add", `{"a": 1, "b": "two"}`)
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			got := req.ToolResults()["call_2_0"]
			if !strings.Contains(got, "b") || !strings.Contains(got, "integer") {
				t.Errorf("the model was told %q, want the field b and its type", got)
			}
			return openaitest.Call("add", `{"a": 1, "b": 2}`)
		}),
		openaitest.Text("1 + 2 = 3"),
	)
	a, log := newAgent(srv, tk)
	res, err := a.Run(context.Background(), "add 1 and 2")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "1 + 2 = 3" || calls.Load() != 1 {
		t.Errorf("answer %q with the tool run %d times, want the answer after one good call", res.Answer, calls.Load())
	}
	if r := log.results(); len(r) != 3 || r[2].Content != "3" {
		t.Errorf("tool results %+v, want two explanations then 3", r)
	}
}

func TestStepLimitEndsTheRunWithAClearResult(t *testing.T) {
	tk, calls := adder()
	srv := openaitest.New(t,
		openaitest.Call("add", `{"a":1,"b":1}`),
		openaitest.Call("add", `{"a":2,"b":2}`),
	)
	a, log := newAgent(srv, tk)
	a.MaxSteps = 2
	res, err := a.Run(context.Background(), "loop forever")
	if err != nil {
		t.Fatalf("reaching the step limit is not an error, got %v", err)
	}
	if res.Reason != agentloop.StopMaxSteps || res.Steps != 2 || calls.Load() != 2 || res.Answer != "" {
		t.Errorf("result %s after %d steps and %d tool runs, answer %q; want max_steps after 2 and 2", res.Reason, res.Steps, calls.Load(), res.Answer)
	}
	last, ok := log.events[len(log.events)-1].(agentloop.Finished)
	if !ok || last.Result.Reason != agentloop.StopMaxSteps || last.Err != nil {
		t.Errorf("last event %#v, want Finished with max_steps", log.events[len(log.events)-1])
	}
}

func TestTokenBudgetStopsBeforeTheNextCall(t *testing.T) {
	tk, _ := adder()
	srv := openaitest.New(t, openaitest.Reply{
		ToolCalls: []openaitest.ToolCall{{Name: "add", Arguments: `{"a":1,"b":1}`}},
		Usage:     &openaitest.Usage{PromptTokens: 900, CompletionTokens: 100, TotalTokens: 1000},
	})
	a, _ := newAgent(srv, tk)
	a.MaxTokens = 500
	res, err := a.Run(context.Background(), "spend")
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != agentloop.StopTokenBudget || res.Usage.TotalTokens != 1000 || len(srv.Requests()) != 1 {
		t.Errorf("result %s with %d tokens after %d requests, want token_budget, 1000, 1", res.Reason, res.Usage.TotalTokens, len(srv.Requests()))
	}
}

func TestModelEndings(t *testing.T) {
	tests := []struct {
		name   string
		reply  openaitest.Reply
		reason agentloop.StopReason
		answer string
	}{
		{"refusal", openaitest.Refusal("I can't help with that."), agentloop.StopRefused, "I can't help with that."},
		{"cut at the output limit", openaitest.Reply{Text: "The answer is", FinishReason: "length"}, agentloop.StopLength, "The answer is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := openaitest.New(t, tt.reply)
			a, _ := newAgent(srv, toolkit.Of())
			res, err := a.Run(context.Background(), "go")
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason != tt.reason || res.Answer != tt.answer {
				t.Errorf("got %s %q, want %s %q", res.Reason, res.Answer, tt.reason, tt.answer)
			}
		})
	}
}

func TestBadConfigurationIsReported(t *testing.T) {
	tk, _ := adder()
	client := agentloop.NewClient(goopenai.DefaultConfig("k"))
	tests := []struct {
		name  string
		agent agentloop.Agent
		want  string
	}{
		{"no client", agentloop.Agent{Model: "m", Tools: tk}, "Client is nil"},
		{"no model", agentloop.Agent{Client: client, Tools: tk}, "Model is empty"},
		{"no tools", agentloop.Agent{Client: client, Model: "m"}, "Tools is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.agent.Run(context.Background(), "x")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// sandboxTools returns the built-in run_command over a real sandbox (the strongest tier the
// machine has: the test is about cancellation, not isolation).
func sandboxTools(t *testing.T) (*toolkit.Toolkit, *sandbox.Sandbox) {
	t.Helper()
	sb, err := sandbox.New(context.Background(), sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	tk, err := toolkit.ForSandbox(sb).Subset("run_command")
	if err != nil {
		t.Fatal(err)
	}
	return tk, sb
}

func TestCancelDuringALongToolCallKillsTheProcess(t *testing.T) {
	tk, sb := sandboxTools(t)
	// The sleep carries a unique duration so the host can find it in
	// /proc whatever PID namespace the sandbox has.
	marker := fmt.Sprintf("300.%d", time.Now().UnixNano()%1000000007)
	srv := openaitest.New(t, openaitest.Call("run_command", `{"command":"echo started > started.txt; exec sleep `+marker+`","timeout_seconds":600}`))
	a, _ := newAgent(srv, tk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startedFile := filepath.Join(sb.Info().HostWorkspace, "started.txt")
	seen := make(chan bool, 1)
	a.OnEvent = func(e agentloop.Event) {
		if _, ok := e.(agentloop.ToolCall); !ok {
			return
		}
		go func() { // the tool runs once this event returns: wait for the process, then cancel
			for ctx.Err() == nil {
				if _, err := os.Stat(startedFile); err == nil && len(sleepers(marker)) > 0 {
					seen <- true
					cancel()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	started := time.Now()
	res, err := a.Run(ctx, "sleep a long time")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ctx's error", err)
	}
	if res.Reason != agentloop.StopCanceled {
		t.Errorf("reason %s, want canceled", res.Reason)
	}
	if d := time.Since(started); d > time.Minute {
		t.Errorf("Run returned after %v; the tool call was not stopped", d)
	}
	<-seen
	deadline := time.Now().Add(5 * time.Second)
	for {
		live := 0
		for _, p := range sleepers(marker) {
			if alive(p) {
				live++
			}
		}
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandboxed sleep %s still runs after cancellation", marker)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Only the tool's process was killed: the sandbox still serves the next run.
	out, err := sb.Commands.Run(context.Background(), sandbox.Command{Shell: "echo still here"})
	if err != nil || out.Stdout != "still here\n" {
		t.Errorf("after the cancellation the sandbox answered %+v, %v", out, err)
	}
}

// sleepers returns the host pids of processes whose command line holds marker.
func sleepers(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte("sleep\x00"+marker)) {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid is a live process (a zombie awaiting its parent counts as dead).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func TestCancelDuringTheModelCall(t *testing.T) {
	srv := openaitest.New(t, openaitest.Reply{Text: "too late", Delay: time.Minute})
	a, _ := newAgent(srv, toolkit.Of())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	started := time.Now()
	_, err := a.Run(ctx, "go")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ctx's error", err)
	}
	if d := time.Since(started); d > 10*time.Second {
		t.Errorf("Run returned after %v; the model call was not aborted", d)
	}
}

type logIn struct {
	Part int `json:"part" description:"which part of the log"`
}

type logOut string

func (o logOut) ToolText() string { return string(o) }

func TestBudgetShortensOldToolOutputsFirst(t *testing.T) {
	// Each part is 6000 bytes (~1500 tokens) with a recognisable start and end.
	part := func(n int) string {
		return fmt.Sprintf("START-%d\n", n) + strings.Repeat(fmt.Sprintf("line of part %d\n", n), 400)[:5980] + fmt.Sprintf("\nEND-%d", n)
	}
	readLog := toolkit.New("read_log", "Reads a part of the log.", func(ctx context.Context, in logIn) (logOut, error) {
		return logOut(part(in.Part)), nil
	}, toolkit.ReadOnly())
	toolMessages := func(req *openaitest.Request) []goopenai.ChatCompletionMessage {
		var out []goopenai.ChatCompletionMessage
		for _, m := range req.Chat.Messages {
			if m.Role == goopenai.ChatMessageRoleTool {
				out = append(out, m)
			}
		}
		return out
	}
	srv := openaitest.New(t,
		openaitest.Call("read_log", `{"part":1}`),
		openaitest.Call("read_log", `{"part":2}`),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			msgs := toolMessages(req)
			if len(msgs) != 2 {
				t.Errorf("step 3 sent %d tool messages, want 2", len(msgs))
				return openaitest.Text("?")
			}
			old, latest := msgs[0].Content, msgs[1].Content
			if len(old) >= 1000 || !strings.HasPrefix(old, "START-1") || !strings.HasSuffix(old, "END-1") || !strings.Contains(old, "bytes of this old tool output were removed") {
				t.Errorf("the old output was not shortened to its start, a marker and its end (%d bytes):\n%s", len(old), old)
			}
			if latest != part(2) {
				t.Errorf("the latest output was changed (%d bytes); the model asked for it", len(latest))
			}
			return openaitest.Text("read both parts")
		}),
	)
	a, log := newAgent(srv, toolkit.Of(readLog))
	a.ContextWindow = 4000 // room for 3000 in the request: two parts do not fit
	res, err := a.Run(context.Background(), "read the log")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "read both parts" {
		t.Errorf("answer %q", res.Answer)
	}
	var shortened []agentloop.Shortened
	for _, e := range log.events {
		if s, ok := e.(agentloop.Shortened); ok {
			shortened = append(shortened, s)
		}
	}
	if len(shortened) != 1 || shortened[0].Step != 3 || shortened[0].Messages != 1 || shortened[0].After >= shortened[0].Before {
		t.Errorf("shortened events %+v, want one at step 3 for one message", shortened)
	}
}

type plotOut struct{ png []byte }

func (o plotOut) ToolText() string { return "plotted" }
func (o plotOut) ToolImages() []toolkit.Image {
	return []toolkit.Image{{MIMEType: "image/png", Data: o.png}}
}

func TestBudgetDropsOldImagesFirst(t *testing.T) {
	var pic bytes.Buffer
	if err := pngEncode(&pic); err != nil {
		t.Fatal(err)
	}
	plot := toolkit.New("plot", "Plots a part of the data.", func(ctx context.Context, in logIn) (plotOut, error) {
		return plotOut{pic.Bytes()}, nil
	}, toolkit.ReadOnly())
	// images returns, for each user message carrying image parts or the note that replaced
	// them, how many images it still holds.
	images := func(req *openaitest.Request) (kept []int, notes int) {
		for _, m := range req.Chat.Messages {
			if m.Role != goopenai.ChatMessageRoleUser {
				continue
			}
			if strings.Contains(m.Content, "image(s) removed to keep the conversation within the model's context window") {
				notes++
				kept = append(kept, 0)
				continue
			}
			n := 0
			for _, p := range m.MultiContent {
				if p.Type == goopenai.ChatMessagePartTypeImageURL {
					n++
				}
			}
			if n > 0 {
				kept = append(kept, n)
			}
		}
		return kept, notes
	}
	srv := openaitest.New(t,
		openaitest.Call("plot", `{"part":1}`),
		openaitest.Call("plot", `{"part":2}`),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if kept, notes := images(req); len(kept) != 2 || notes != 0 {
				t.Errorf("step 3 sent images %v with %d notes, want both images: they fit", kept, notes)
			}
			return openaitest.Call("plot", `{"part":3}`)
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			kept, notes := images(req)
			if len(kept) != 3 || kept[0] != 0 || kept[2] != 1 || notes == 0 {
				t.Errorf("step 4 sent images %v (0 = replaced by a note), want the oldest replaced and the latest kept", kept)
			}
			return openaitest.Text("seen the plots")
		}),
	)
	a, log := newAgent(srv, toolkit.Of(plot))
	// An image is reckoned at 800 tokens: two and the conversation fit in the 2250 a request
	// may hold, three do not.
	a.ContextWindow = 3000
	res, err := a.Run(context.Background(), "plot the three parts")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "seen the plots" {
		t.Errorf("answer %q", res.Answer)
	}
	var shortened []agentloop.Shortened
	for _, e := range log.events {
		if s, ok := e.(agentloop.Shortened); ok {
			shortened = append(shortened, s)
		}
	}
	if len(shortened) != 1 || shortened[0].Step != 4 || shortened[0].After >= shortened[0].Before {
		t.Errorf("shortened events %+v, want one at step 4", shortened)
	}
}

// pngEncode writes a small PNG.
func pngEncode(w io.Writer) error {
	img := image.NewGray(image.Rect(0, 0, 4, 4))
	return png.Encode(w, img)
}

func TestContextFullStopsBeforeSending(t *testing.T) {
	srv := openaitest.New(t)
	a, _ := newAgent(srv, toolkit.Of())
	a.ContextWindow = 100
	res, err := a.Run(context.Background(), strings.Repeat("a very long task ", 100))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != agentloop.StopContextFull || len(srv.Requests()) != 0 {
		t.Errorf("reason %s after %d requests, want context_full before any", res.Reason, len(srv.Requests()))
	}
}

func TestReadTranscriptRejectsBadInput(t *testing.T) {
	tests := []struct {
		name, input, want string
	}{
		{"not JSON", `{"kind":"start"}` + "\n" + "oops\n", "line 2"},
		{"unknown kind", `{"kind":"start"}` + "\n" + `{"kind":"nap"}` + "\n", `unknown kind "nap"`},
		{"turn without message", `{"kind":"start"}` + "\n" + `{"kind":"turn"}` + "\n", "turn without a message"},
		{"no start", `{"kind":"end"}` + "\n", "does not begin with a start record"},
		{"empty", "", "does not begin with a start record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agentloop.ReadTranscript(strings.NewReader(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
