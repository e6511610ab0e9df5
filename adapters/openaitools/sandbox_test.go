package openaitools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// TestStreamedRoundTripInSandbox is the whole turn with the real go-openai client and the
// built-in tools over a real sandbox: every tool declared (and accepted by the server's
// strict-mode checks), two parallel calls streamed with interleaved argument fragments,
// both executed inside the sandbox, their results sent back and checked by the server.
func TestStreamedRoundTripInSandbox(t *testing.T) {
	sb := sandboxtest.NewDefault(t)
	tk := toolkit.ForSandbox(sb)
	const (
		pyCode = "squares = [n * n for n in range(1, 11)]\nsum(squares)"
		shCmd  = "echo $((6 * 7)) | tee answer.txt"
	)
	srv := openaitest.New(t,
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			names := map[string]bool{}
			for _, tl := range req.Chat.Tools {
				names[tl.Function.Name] = tl.Function.Strict
			}
			if len(req.Chat.Tools) != len(tk.Tools()) || !names["run_python"] || !names["run_command"] {
				t.Errorf("declared tools = %v; want all %d built-ins, run_python and run_command strict", names, len(tk.Tools()))
			}
			return openaitest.Reply{FragmentSize: 4, ToolCalls: []openaitest.ToolCall{
				{ID: "call_py", Name: "run_python", Arguments: jsonObject("code", pyCode)},
				{ID: "call_sh", Name: "run_command", Arguments: jsonObject("command", shCmd)},
			}}
		}),
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			res := req.ToolResults()
			if !strings.Contains(res["call_py"], "385") {
				t.Errorf("run_python result sent back = %q; want the value of sum(squares), 385", res["call_py"])
			}
			if !strings.Contains(res["call_sh"], "42") || !strings.Contains(res["call_sh"], "exit code: 0") {
				t.Errorf("run_command result sent back = %q; want exit code 0 and 42", res["call_sh"])
			}
			asst := req.Chat.Messages[len(req.Chat.Messages)-3]
			if len(asst.ToolCalls) != 2 || asst.ToolCalls[0].Function.Arguments != jsonObject("code", pyCode) ||
				asst.ToolCalls[1].Function.Arguments != jsonObject("command", shCmd) {
				t.Errorf("assistant message sent back = %+v; want both calls with their arguments joined", asst)
			}
			return openaitest.Text("385 and 42; the answer is saved in answer.txt.")
		}),
	)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := srv.Client()
	req := goopenai.ChatCompletionRequest{
		Model:         "gpt-test",
		Messages:      []goopenai.ChatCompletionMessage{{Role: "user", Content: "sum the first ten squares, and save 6*7 in answer.txt"}},
		Tools:         openaitools.Tools(tk),
		StreamOptions: &goopenai.StreamOptions{IncludeUsage: true},
	}
	var answer string
	var order strings.Builder // the index of every tool-call delta, in stream order
	for turn := 0; turn < 2 && answer == ""; turn++ {
		stream, err := client.CreateChatCompletionStream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var acc openaitools.Accumulator
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range chunk.Choices {
				for _, d := range c.Delta.ToolCalls {
					fmt.Fprint(&order, *d.Index)
				}
			}
			if err := acc.Add(chunk); err != nil {
				t.Fatal(err)
			}
		}
		stream.Close()
		if acc.Usage() == nil || acc.FinishReason() == "" {
			t.Errorf("turn %d: usage %v, finish reason %q; want both", turn, acc.Usage(), acc.FinishReason())
		}
		msg := acc.Message()
		req.Messages = append(req.Messages, msg)
		if len(msg.ToolCalls) == 0 {
			answer = msg.Content
			break
		}
		results, err := openaitools.Dispatch(ctx, tk, msg.ToolCalls)
		if err != nil {
			t.Fatal(err)
		}
		req.Messages = append(req.Messages, results...)
	}
	if o := order.String(); !strings.Contains(o, "10") || !strings.Contains(o, "01") {
		t.Errorf("tool-call deltas arrived in index order %s; the round must cover interleaved fragments", o)
	}
	if answer != "385 and 42; the answer is saved in answer.txt." {
		t.Errorf("answer = %q", answer)
	}
	if got, err := sb.Files.ReadFile(ctx, "answer.txt"); err != nil || string(got) != "42\n" {
		t.Errorf("answer.txt in the sandbox = %q, %v; want 42", got, err)
	}
}

// jsonObject renders {"key": value} the way a model writes arguments.
func jsonObject(key, value string) string {
	b, err := json.Marshal(map[string]string{key: value})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestPlotFromRunPythonReachesTheModel sends a real matplotlib figure from run_python back to
// the model: the tool message says an image follows, and the next message, from the user
// (the role that may carry images), holds it as a PNG data: URL. The server accepts the
// conversation, which it would not if the image were in the tool message.
func TestPlotFromRunPythonReachesTheModel(t *testing.T) {
	sb := sandboxtest.NewDefault(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"python3", "-c", "import matplotlib"}}); err != nil || res.ExitCode != 0 {
		if strings.Contains(os.Getenv("SANDBOXKIT_REQUIRE"), "python") {
			t.Fatalf("SANDBOXKIT_REQUIRE has python, but the sandbox's python3 cannot import matplotlib: %v %+v", err, res)
		}
		t.Skip("the sandbox's python3 has no matplotlib (apt-get install python3-matplotlib)")
	}
	tk := toolkit.ForSandbox(sb)
	const plot = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"
	srv := openaitest.New(t,
		openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "plot", Name: "run_python", Arguments: jsonObject("code", plot)}}},
		openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			if got := req.ToolResults()["plot"]; !strings.Contains(got, "[1 image(s) from this call follow in the next user message]") {
				t.Errorf("tool message = %q; want it to announce the image", got)
			}
			last := req.LastMessage()
			if last.Role != "user" || len(last.MultiContent) != 2 || last.MultiContent[1].ImageURL == nil ||
				!strings.HasPrefix(last.MultiContent[1].ImageURL.URL, "data:image/png;base64,iVBORw0KGgo") {
				t.Errorf("message after the tool message = %+v; want a user message with the PNG", last)
			}
			return openaitest.Text("a parabola")
		}),
	)
	client := srv.Client()
	req := goopenai.ChatCompletionRequest{
		Model:    "gpt-test",
		Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "plot x squared"}},
		Tools:    openaitools.Tools(tk),
	}
	resp, err := client.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	results, err := openaitools.Dispatch(ctx, tk, msg.ToolCalls)
	if err != nil {
		t.Fatal(err)
	}
	req.Messages = append(append(req.Messages, msg), results...)
	if resp, err = client.CreateChatCompletion(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "a parabola" {
		t.Errorf("answer = %q", got)
	}
}
