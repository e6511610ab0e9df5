package agentloop_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/agentloop"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// BenchmarkRunInAFreshSandbox measures a whole run in a sandbox of its own — a model call
// that asks for run_command("true"), the command, and a model call that answers, against a
// scripted endpoint on 127.0.0.1 — with the sandbox taken from a pool (Agent.Sandboxes)
// against the floor of creating it for the run (sandbox.New, the tools, Run, Close), in the
// same run, and against a run in a sandbox already held (the same sandbox for every run:
// the lower bound). Between runs the timer stops for 100 ms while the pool starts the
// replacement, as it would between a service's requests; a pool drained by back-to-back
// runs waits for creates like the floor does.
//
//	go test -run '^$' -bench RunInAFreshSandbox -count 5 ./agentloop
func BenchmarkRunInAFreshSandbox(b *testing.B) {
	opts := []sandbox.Option{sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)}
	script := func(n int) []openaitest.Step {
		steps := make([]openaitest.Step, 0, 2*n)
		for range n {
			steps = append(steps, openaitest.Call("run_command", `{"command":"true"}`), openaitest.Text("done"))
		}
		return steps
	}
	// firstResult times, per run, the wait from the start (before sandbox.New for the
	// floor) to the first tool result: what a user of the run waits for.
	var began time.Time
	var waited time.Duration
	firstResult := func(e agentloop.Event) {
		if _, ok := e.(agentloop.ToolResult); ok {
			waited += time.Since(began)
		}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(waited.Microseconds())/1000/float64(b.N), "ms-to-first-result")
		waited = 0
	}
	pause := func(b *testing.B) {
		b.StopTimer()
		time.Sleep(100 * time.Millisecond)
		b.StartTimer()
	}
	b.Run("floor=sandbox.New", func(b *testing.B) {
		srv := openaitest.New(b, script(b.N)...)
		a, _ := newAgent(srv, nil)
		a.OnEvent = firstResult
		b.ResetTimer()
		for range b.N {
			began = time.Now()
			sb, err := sandbox.New(context.Background(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			a.Tools = toolkit.ForSandbox(sb)
			res, err := a.Run(context.Background(), "run true")
			sb.Close()
			if err != nil || res.ToolCalls != 1 {
				b.Fatal(err, res)
			}
			pause(b)
		}
		report(b)
	})
	b.Run("floor=sandbox-held", func(b *testing.B) {
		sb, err := sandbox.New(context.Background(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Close()
		srv := openaitest.New(b, script(b.N)...)
		a, _ := newAgent(srv, toolkit.ForSandbox(sb))
		a.OnEvent = firstResult
		b.ResetTimer()
		for range b.N {
			began = time.Now()
			if res, err := a.Run(context.Background(), "run true"); err != nil || res.ToolCalls != 1 {
				b.Fatal(err, res)
			}
			pause(b)
		}
		report(b)
	})
	b.Run("pool", func(b *testing.B) {
		pool, err := sandbox.NewPool(context.Background(), sandbox.PoolConfig{Size: 2}, opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		srv := openaitest.New(b, script(b.N)...)
		a, _ := newAgent(srv, nil)
		a.OnEvent = firstResult
		a.Sandboxes = pool
		b.ResetTimer()
		for range b.N {
			began = time.Now()
			res, err := a.Run(context.Background(), "run true")
			if err != nil || res.ToolCalls != 1 {
				b.Fatal(err, res)
			}
			pause(b)
		}
		report(b)
	})
}
