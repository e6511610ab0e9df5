package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/agentloop"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// The demo transcript, demo.jsonl, is made from the script below: the model's turns are
// written by hand (there is no model here), and
//
//	go test ./examples/agentloop -run TestDemoTranscript -update
//
// plays them through the scripted OpenAI-compatible server with the built-in tools in a real
// sandbox and records the run, so every tool result in the file is one the tools really
// produced. The turns use only the standard library and matplotlib, which is all the demo
// asks of the machine's /usr/bin/python3.
var update = flag.Bool("update", false, "regenerate demo.jsonl from demoTurns")

const demoPath = "demo.jsonl"

const demoModel = "gpt-4o-mini"

const demoTask = `Our shop sold these units per month in the first half of 2026 (January to June):
North 120, 135, 150, 160, 158, 175; South 90, 88, 95, 110, 125, 140; West 60, 72, 70, 85, 96, 104.
A unit sells for EUR 12.50. Save the data as sales.csv, compute revenue per region and month-over-month
growth with Python, plot units per month by region to sales.png, and write a short markdown report,
report.md, with the key numbers and the plot.`

const demoCSV = `month,region,units
2026-01,North,120
2026-01,South,90
2026-01,West,60
2026-02,North,135
2026-02,South,88
2026-02,West,72
2026-03,North,150
2026-03,South,95
2026-03,West,70
2026-04,North,160
2026-04,South,110
2026-04,West,85
2026-05,North,158
2026-05,South,125
2026-05,West,96
2026-06,North,175
2026-06,South,140
2026-06,West,104
`

const demoLoad = `import csv

with open("sales.csv", newline="") as f:
    rows = list(csv.DictReader(f))
print(len(rows), "rows; columns:", list(rows[0]))
print("regions:", sorted({r["region"] for r in rows}))
print("months:", rows[0]["month"], "to", rows[-1]["month"])
`

// demoBuggyRevenue has the slip a model makes: a column name from memory, not from the file.
const demoBuggyRevenue = `PRICE = 12.50  # EUR per unit
units = {}
for r in rows:
    units[r["region"]] = units.get(r["region"], 0) + int(r["unit"])
units
`

const demoAnalysis = `PRICE = 12.50  # EUR per unit
months = sorted({r["month"] for r in rows})
regions = sorted({r["region"] for r in rows})
# The rows are in month order, so each region's list is too.
series = {g: [int(r["units"]) for r in rows if r["region"] == g] for g in regions}

print(f"{'region':<8}{'units':>7}{'revenue EUR':>14}{'Jan->Jun':>10}")
for g in sorted(regions, key=lambda g: -sum(series[g])):
    s = series[g]
    print(f"{g:<8}{sum(s):>7}{sum(s) * PRICE:>14,.2f}{(s[-1] / s[0] - 1) * 100:>+9.1f}%")
total = sum(map(sum, series.values()))
print(f"{'all':<8}{total:>7}{total * PRICE:>14,.2f}")

print("\nmonth-over-month growth in units (%)")
print("month   " + "".join(f"{g:>8}" for g in regions))
for i in range(1, len(months)):
    print(months[i] + " " + "".join(f"{(series[g][i] / series[g][i - 1] - 1) * 100:>+8.1f}" for g in regions))

by_month = [sum(series[g][i] for g in regions) for i in range(len(months))]
best = max(range(len(months)), key=by_month.__getitem__)
print("\nbest month overall:", months[best], "with", by_month[best], "units")
`

const demoPlot = `import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
for g in regions:
    ax.plot(months, series[g], marker="o", linewidth=2, label=g)
ax.set_title("Units sold per month by region, January to June 2026")
ax.set_xlabel("Month")
ax.set_ylabel("Units")
ax.grid(True, alpha=0.3)
ax.legend(title="Region")
fig.tight_layout()
fig.savefig("sales.png")
print("saved sales.png,", "x".join(str(round(v)) for v in fig.get_size_inches() * fig.dpi), "pixels")
`

const demoReport = `# Sales report, January to June 2026

Data: ` + "`sales.csv`" + ` (units sold per month in three regions; one unit sells for EUR 12.50).

## Totals

| Region | Units | Revenue (EUR) | January to June |
|---|---:|---:|---:|
| North | 898 | 11,225.00 | +45.8% |
| South | 648 | 8,100.00 | +55.6% |
| West | 487 | 6,087.50 | +73.3% |
| **All** | **2,033** | **25,412.50** | |

## Trends

- North sells the most every month but grows the slowest; its only dip was in May (-1.2%).
- South dipped in February (-2.2%), then grew every month, by 12-16% from April on.
- West is the smallest region but grew the fastest: +73.3% since January, despite a dip in March (-2.8%).
- June was the best month overall, with 419 units.

![Units sold per month by region](sales.png)
`

const demoAnswer = "Done. I saved the data as `sales.csv`, computed the figures in Python, plotted them and wrote the report.\n\n" +
	"- Total: 2,033 units, EUR 25,412.50 of revenue at EUR 12.50 a unit.\n" +
	"- North leads with 898 units (EUR 11,225.00), then South with 648 (EUR 8,100.00) and West with 487 (EUR 6,087.50).\n" +
	"- Growth from January to June: West +73.3%, South +55.6%, North +45.8%; June was the best month (419 units).\n\n" +
	"Files in the workspace: `sales.csv` (the data), `sales.png` (units per month by region) and `report.md` (the report, with the plot embedded)."

// demoTurns are the model's turns, in order. Optional arguments are sent as null, as a
// model in strict mode sends them.
var demoTurns = []openaitest.Reply{
	{
		Text: "I'll save the data in long format, one row per month and region, which is the easiest shape to group.",
		ToolCalls: []openaitest.ToolCall{{ID: "call_Hq3ZpL0vWc8sKx2mB7nRt4Ya", Name: "write_file",
			Arguments: jsonArgs("path", "sales.csv", "content", demoCSV, "append", nil)}},
	},
	{
		Text: "Now I load it in the Python kernel, which keeps variables between calls, and check that it reads back as intended.",
		ToolCalls: []openaitest.ToolCall{{ID: "call_c1Vd9TgE5uNw0oJq6LfXs3Kb", Name: "run_python",
			Arguments: jsonArgs("code", demoLoad, "context_id", nil, "timeout_seconds", nil)}},
	},
	{
		Text: "All 18 rows are there. Now the units and revenue per region.",
		ToolCalls: []openaitest.ToolCall{{ID: "call_T5nGw0rKe3Lj8vBy2ZqHm9Ps", Name: "run_python",
			Arguments: jsonArgs("code", demoBuggyRevenue, "context_id", nil, "timeout_seconds", nil)}},
	},
	{
		Text: "The column is `units`, not `unit` (the header printed above says so). Fixing that, and adding the month-over-month growth:",
		ToolCalls: []openaitest.ToolCall{{ID: "call_Bz6Xq1eYh4Ws9cNk7Gv2Ma0J", Name: "run_python",
			Arguments: jsonArgs("code", demoAnalysis, "context_id", nil, "timeout_seconds", nil)}},
	},
	{
		Text: "Now the plot: units per month, one line per region.",
		ToolCalls: []openaitest.ToolCall{{ID: "call_W2kLp8sDf5Rz0bXn3Hq7Tc6V", Name: "run_python",
			Arguments: jsonArgs("code", demoPlot, "context_id", nil, "timeout_seconds", nil)}},
	},
	{
		Text: "The plot shows what the numbers say: North on top, West climbing fastest. Now the report.",
		ToolCalls: []openaitest.ToolCall{{ID: "call_M9eUa3yJt6Gc1oVr8Kw4Zn5Q", Name: "write_file",
			Arguments: jsonArgs("path", "report.md", "content", demoReport, "append", nil)}},
	},
	{
		ToolCalls: []openaitest.ToolCall{{ID: "call_F4hSb7nXq0Pe2mLd9Yt5Cw1R", Name: "run_command",
			Arguments: jsonArgs("command", "ls sales.csv sales.png report.md && head -n 1 report.md", "cwd", nil, "timeout_seconds", nil)}},
	},
	{Text: demoAnswer},
}

// jsonArgs writes tool-call arguments as a model does: a JSON object whose keys are in the
// order given (a map would sort them).
func jsonArgs(kv ...any) string {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv[i])
		v, err := json.Marshal(kv[i+1])
		if err != nil {
			panic(fmt.Sprintf("jsonArgs: %v", err))
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.String()
}

// TestDemoTranscript checks that the shipped transcript holds exactly the turns of
// demoTurns (so the two cannot drift apart), and with -update regenerates it.
func TestDemoTranscript(t *testing.T) {
	if *update {
		generateDemo(t)
	}
	tr := readDemo(t)
	if s := tr.Start(); s.Task != demoTask || s.System != systemPrompt || s.Model != demoModel {
		t.Errorf("the transcript's start record does not match demoTask, systemPrompt and demoModel; run with -update")
	}
	turns := tr.Turns()
	if len(turns) != len(demoTurns) {
		t.Fatalf("the transcript has %d turns, demoTurns %d; run with -update", len(turns), len(demoTurns))
	}
	for i, want := range demoTurns {
		got := turns[i].Message
		if got.Content != want.Text || len(got.ToolCalls) != len(want.ToolCalls) {
			t.Errorf("turn %d differs from demoTurns; run with -update", i+1)
			continue
		}
		for j, c := range want.ToolCalls {
			g := got.ToolCalls[j]
			if g.ID != c.ID || g.Function.Name != c.Name || g.Function.Arguments != c.Arguments {
				t.Errorf("turn %d, call %d differs from demoTurns; run with -update", i+1, j+1)
			}
		}
	}
	if end := tr.Records[len(tr.Records)-1]; end.Kind != agentloop.KindEnd || end.Reason != agentloop.StopAnswered || end.Answer != demoAnswer {
		t.Errorf("the recorded run did not end with the demo's answer: %+v", end)
	}
}

func readDemo(t *testing.T) *agentloop.Transcript {
	t.Helper()
	f, err := os.Open(demoPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := agentloop.ReadTranscript(f)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// dataURL matches an inline image in a request.
var dataURL = regexp.MustCompile(`data:image/[a-z]+;base64,[A-Za-z0-9+/=]+`)

// demoUsage is the usage a hosted model would report for the request and reply: about four
// bytes a token for text, and a fixed cost per image, which the API counts by its size in
// tiles, not by its base64 bytes (which the scripted server would count).
func demoUsage(req *openaitest.Request, r openaitest.Reply) *openaitest.Usage {
	const imageTokens = 765 // an 800x450 image at high detail: 85 + 4 tiles of 170
	images := dataURL.FindAll(req.Body, -1)
	text := len(req.Body)
	for _, im := range images {
		text -= len(im)
	}
	prompt := text/4 + len(images)*imageTokens
	out := len(r.Text)
	for _, c := range r.ToolCalls {
		out += len(c.Name) + len(c.Arguments)
	}
	completion := out/4 + 1
	return &openaitest.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// generateDemo plays demoTurns through the scripted server with the built-in tools in a
// real sandbox and writes the transcript.
func generateDemo(t *testing.T) {
	ws := workspace(t)
	sb, err := sandbox.New(context.Background(), sandbox.WithWorkspace(ws))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	steps := make([]openaitest.Step, len(demoTurns))
	for i, r := range demoTurns {
		r.Sequential = true // as OpenAI streams parallel calls
		r.FragmentSize = 24
		steps[i] = openaitest.StepFunc(func(req *openaitest.Request) openaitest.Reply {
			r.Usage = demoUsage(req, r)
			return r
		})
	}
	srv := openaitest.New(t, steps...)
	var buf bytes.Buffer
	a := &agentloop.Agent{
		Client:     srv.Client(),
		Model:      demoModel,
		System:     systemPrompt,
		Tools:      toolkit.ForSandbox(sb),
		Transcript: &buf,
	}
	res, err := a.Run(context.Background(), demoTask)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != agentloop.StopAnswered {
		t.Fatalf("the demo ended with %s", res.Reason)
	}
	for _, name := range []string{"sales.csv", "sales.png", "report.md"} {
		if _, err := os.Stat(filepath.Join(ws, name)); err != nil {
			t.Fatalf("the demo did not make %s: %v", name, err)
		}
	}
	if err := os.WriteFile(demoPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
