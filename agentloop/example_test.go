package agentloop_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/sandboxkit/sandboxkit/agentloop"
)

// A recorded run replays offline: the model's turns come from the transcript, the tools
// really run. The transcript here is written by hand; Agent.Transcript records real ones.
func ExampleReplayClient() {
	recorded := `{"kind":"start","model":"gpt-4o-mini","task":"What is 20+22?"}
{"kind":"turn","step":1,"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"add","arguments":"{\"a\":20,\"b\":22}"}}]}}
{"kind":"tool_result","step":1,"tool_call_id":"c1","tool":"add","content":"42"}
{"kind":"turn","step":2,"message":{"role":"assistant","content":"20 + 22 = 42."}}
`
	tr, err := agentloop.ReadTranscript(strings.NewReader(recorded))
	if err != nil {
		log.Fatal(err)
	}
	tk, _ := adder()
	a := &agentloop.Agent{
		Client: agentloop.ReplayClient(tr),
		Model:  tr.Start().Model,
		Tools:  tk,
		OnEvent: func(e agentloop.Event) {
			switch e := e.(type) {
			case agentloop.ToolCall:
				fmt.Println("call:", e.Name, e.Arguments)
			case agentloop.ToolResult:
				fmt.Println("result:", e.Content)
			}
		},
	}
	res, err := a.Run(context.Background(), tr.Start().Task)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Reason+":", res.Answer)
	// Output:
	// call: add {"a":20,"b":22}
	// result: 42
	// answered: 20 + 22 = 42.
}
