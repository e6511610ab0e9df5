package toolkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// These tests read tool results as a model reads them (issue 18, "what the model sees").

func call(t *testing.T, kit *toolkit.Toolkit, tool, args string) toolkit.Result {
	t.Helper()
	res, err := kit.Call(context.Background(), tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return res
}

// savedFile returns the path the marker of text names for the whole output.
var savedFileRE = regexp.MustCompile(`(?:whole output is in|output is saved in) (\S+?)[:,]`)

// TestLongOutputHeadAndTail: `seq 1 200000` showed lines 1–6221 and lost the tail; its saved
// "full output" held 11,455 lines (bash) or was capped at 1 MiB (run_command). Now the result
// shows the start and the end, the marker says how much is left out, and the file holds it
// all.
func TestLongOutputHeadAndTail(t *testing.T) {
	sb := newSandbox(t)
	kit := toolkit.ForSandbox(sb)
	for _, tc := range []struct{ tool, args string }{
		{"run_command", `{"command":"seq 1 200000"}`},
		{"bash", `{"command":"seq 1 200000"}`},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			res := call(t, kit, tc.tool, tc.args)
			if res.IsError {
				t.Fatalf("error result: %s", res.Text)
			}
			lines := strings.Split(res.Text, "\n")
			if !strings.Contains(res.Text, "\n1\n2\n3\n") {
				t.Errorf("the start of the output is not shown:\n%.300s", res.Text)
			}
			if strings.Contains(res.Text, "Limits.") || strings.Contains(res.Text, "MaxOutputBytes") {
				t.Errorf("the result names Go API a model cannot use:\n%s", markerLines(res.Text))
			}
			if last := lines[len(lines)-1]; last != "200000" {
				t.Errorf("the last line shown is %q, want 200000 (the end of the output)", last)
			}
			m := regexp.MustCompile(`\[… ([0-9,]+) lines \(([0-9.]+ [KM]B)\) omitted; the whole output is in (\S+): read_file`).FindStringSubmatch(res.Text)
			if m == nil {
				t.Fatalf("no marker saying how many lines are omitted and where the whole output is:\n%s", markerLines(res.Text))
			}
			omitted, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
			shown := 0
			for _, l := range lines {
				if _, err := strconv.Atoi(l); err == nil {
					shown++
				}
			}
			if shown+omitted != 200000 {
				t.Errorf("%d lines shown + %d said omitted = %d, want 200000", shown, omitted, shown+omitted)
			}
			wc, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c", "wc -l < " + m[3] + " && tail -n 1 " + m[3]}})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(wc.Stdout); len(got) != 2 || got[0] != "200000" || got[1] != "200000" {
				t.Errorf("the saved file %s: wc -l and last line %q, want 200000 lines ending in 200000", m[3], wc.Stdout)
			}
			t.Logf("%s: %d bytes shown, about %d tokens (bytes/4); marker: %s", tc.tool, len(res.Text), (len(res.Text)+3)/4, markerLines(res.Text))
		})
	}
}

func markerLines(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "[…") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestShortOutputLeavesNoFile: output shown whole needs no saved copy.
func TestShortOutputLeavesNoFile(t *testing.T) {
	sb := newSandbox(t)
	kit := toolkit.ForSandbox(sb)
	call(t, kit, "run_command", `{"command":"echo hi"}`)
	call(t, kit, "bash", `{"command":"echo hi"}`)
	g, err := sb.Files.Glob(context.Background(), "**/*.txt", ".sandboxkit")
	if err == nil && len(g.Paths) > 0 {
		t.Errorf("files left for output shown whole: %v", g.Paths)
	}
}

// TestSavedOutputCapIsSaid: when even the file was cut, the marker says so.
func TestSavedOutputCapIsSaid(t *testing.T) {
	sb := newSandbox(t)
	kit := toolkit.ForSandbox(sb, toolkit.SavedOutputLimit(100_000))
	for _, tool := range []string{"run_command", "bash"} {
		res := call(t, kit, tool, `{"command":"seq 1 200000"}`)
		if !strings.Contains(res.Text, "it holds only the start") {
			t.Errorf("%s: the marker does not say the saved file was cut:\n%s", tool, markerLines(res.Text))
		}
		if !strings.HasSuffix(res.Text, "\n200000") {
			t.Errorf("%s: the end of the output is not shown", tool)
		}
	}
}

func TestPythonDisplayAndResultInOrder(t *testing.T) {
	sb := newSandbox(t)
	requirePython(t, sb)
	kit := toolkit.ForSandbox(sb)
	for _, tc := range []struct{ code, want string }{
		{"display('DISP-ONE'); 'RES-TWO'", "--- display ---\n'DISP-ONE'\n--- result ---\n'RES-TWO'"},
		{"display('DISP-ONE'); print('PRINTED'); 'RES-TWO'", "--- display ---\n'DISP-ONE'\n--- stdout ---\nPRINTED\n--- result ---\n'RES-TWO'"},
		{"print('a'); display('D'); print('b')", "--- stdout ---\na\n--- display ---\n'D'\n--- stdout ---\nb"},
	} {
		code, _ := json.Marshal(tc.code)
		res := call(t, kit, "run_python", `{"code":`+string(code)+`}`)
		if !strings.Contains(res.Text, tc.want) {
			t.Errorf("%s:\n%s\nwant, in this order:\n%s", tc.code, res.Text, tc.want)
		}
	}
}

func TestPythonNewContextIsCreated(t *testing.T) {
	sb := newSandbox(t)
	requirePython(t, sb)
	kit := toolkit.ForSandbox(sb)
	call(t, kit, "run_python", `{"code":"x = 1"}`)
	res := call(t, kit, "run_python", `{"code":"'x' in dir()","context_id":"second"}`)
	if res.IsError || !strings.Contains(res.Text, "context: second (new") || !strings.Contains(res.Text, "False") {
		t.Fatalf("a new context_id: %s", res.Text)
	}
	res = call(t, kit, "run_python", `{"code":"y = 2; y","context_id":"second"}`)
	if res.IsError || strings.Contains(res.Text, "(new") {
		t.Fatalf("the second call in the context: %s", res.Text)
	}
	info := call(t, kit, "sandbox_info", `{}`)
	if !regexp.MustCompile(`python contexts: default \(1 run\), second \(2 runs\); at most \d+`).MatchString(info.Text) {
		t.Errorf("sandbox_info does not list the contexts:\n%s", info.Text)
	}
	// At the limit, the error names the contexts to reuse.
	for i := 0; i < sandbox.MaxPythonContexts; i++ {
		res = call(t, kit, "run_python", fmt.Sprintf(`{"code":"1","context_id":"c%d"}`, i))
		if res.IsError {
			break
		}
	}
	if !res.IsError || !strings.Contains(res.Text, "default, second, c0") && !strings.Contains(res.Text, "c0, c1") || !strings.Contains(res.Text, "pass one of them as context_id") {
		t.Errorf("past the limit: %s", res.Text)
	}
}

func requirePython(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	if !sb.Info().PythonAvailable {
		sandboxtest.Unavailable(t, "python", "python3 is not installed here")
	}
}

func TestBackgroundJobLongOutput(t *testing.T) {
	sb := newSandbox(t)
	kit := toolkit.ForSandbox(sb)
	call(t, kit, "start_background", `{"command":"seq 1 200000"}`)
	var res toolkit.Result
	deadline := time.Now().Add(time.Minute)
	for {
		res = call(t, kit, "read_background_output", `{"job_id":"job-1","from_start":true}`)
		if strings.Contains(res.Text, "exited with code 0") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasSuffix(res.Text, "\n200000") {
		t.Errorf("the end of the job's output is not shown:\n%s", markerLines(res.Text))
	}
	m := savedFileRE.FindStringSubmatch(res.Text)
	if m == nil {
		t.Fatalf("no file named for the whole output:\n%s", markerLines(res.Text))
	}
	wc, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"wc", "-l", m[1]}})
	if err != nil || !strings.HasPrefix(wc.Stdout, "200000 ") {
		t.Errorf("the job's file %s: %q %v, want 200000 lines", m[1], wc.Stdout, err)
	}
}

// TestEveryArgumentIsDescribed: 17 of the 41 arguments had no description, and the timeouts
// said "default 60" whatever the sandbox's timeout was.
func TestEveryArgumentIsDescribed(t *testing.T) {
	kit := toolkit.ForSandbox(nil)
	n := 0
	for _, tool := range kit.Tools() {
		var schema struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(tool.Schema(), &schema); err != nil {
			t.Fatal(err)
		}
		for name, p := range schema.Properties {
			n++
			if strings.TrimSpace(p.Description) == "" {
				t.Errorf("%s.%s has no description", tool.Name(), name)
			}
			if regexp.MustCompile(`default \d+ ?s?$|default 60`).MatchString(p.Description) && strings.Contains(name, "timeout") {
				t.Errorf("%s.%s: %q names a fixed default; the sandbox's applies", tool.Name(), name, p.Description)
			}
		}
	}
	t.Logf("%d arguments, all described", n)
}

// TestMessagesSpeakInToolTerms: messages named Go APIs a model cannot call ("use CopyIn for
// large files", "with Input, wait for it with Wait"), and an unknown 10 MB argument name came
// back whole in the error.
func TestMessagesSpeakInToolTerms(t *testing.T) {
	sb := newSandbox(t)
	kit := toolkit.ForSandbox(sb)
	big, _ := json.Marshal(strings.Repeat("x", 9<<20))
	res := call(t, kit, "write_file", `{"path":"big.txt","content":`+string(big)+`}`)
	if !res.IsError || strings.Contains(res.Text, "CopyIn") || !strings.Contains(res.Text, "append: true") {
		t.Errorf("write_file of 9 MB: %.300s", res.Text)
	}
	call(t, kit, "bash", `{"command":"sleep 30","timeout_seconds":1}`)
	res = call(t, kit, "bash", `{"command":"echo again"}`)
	if !res.IsError || regexp.MustCompile(`\bwith (Input|Wait)\b`).MatchString(res.Text) || !strings.Contains(res.Text, "send input") {
		t.Errorf("bash while a command runs: %s", res.Text)
	}
	call(t, kit, "bash", `{"input":"C-c"}`)
	key := strings.Repeat("k", 10<<20)
	res = call(t, kit, "read_file", `{"path":"a","`+key+`":1}`)
	if !res.IsError || len(res.Text) > 1000 || !strings.Contains(res.Text, "unknown argument") {
		t.Errorf("an unknown 10 MB argument name: a %d byte error (%.200s), want a short one", len(res.Text), res.Text)
	}
	var keys []string
	for i := 0; i < 5000; i++ {
		keys = append(keys, fmt.Sprintf(`"k%d":1`, i))
	}
	res = call(t, kit, "read_file", `{"path":"a",`+strings.Join(keys, ",")+`}`)
	if !res.IsError || len(res.Text) > 4000 {
		t.Errorf("5000 unknown arguments: a %d byte error, want a short one", len(res.Text))
	}
}

// TestSandboxInfoSaysTheTiersLimits: on the landlock tier /tmp is not writable and host
// processes are visible, and sandbox_info said neither; a model wrote to /tmp, failed, and
// guessed.
func TestSandboxInfoSaysTheTiersLimits(t *testing.T) {
	sb, err := sandbox.New(context.Background(), sandbox.WithDriver(local.New(local.WithTier(sandbox.TierLandlock))), sandbox.AllowWeaker(sandbox.TierLandlock))
	if err != nil {
		sandboxtest.Unavailable(t, "landlock", err.Error())
	}
	t.Cleanup(func() { sb.Close() })
	kit := toolkit.ForSandbox(sb)
	info := call(t, kit, "sandbox_info", `{}`).Text
	if !strings.Contains(info, "temporary files: /tmp is not writable here: use $TMPDIR") || !strings.Contains(info, "processes: ps and /proc show host processes") {
		t.Errorf("sandbox_info on the landlock tier does not say where temporary files go and what is visible:\n%s", info)
	}
	// What it says is what holds.
	res := call(t, kit, "run_command", `{"command":"echo ok > /tmp/sbx-probe.txt"}`)
	if strings.Contains(res.Text, "exit code: 0") {
		t.Errorf("/tmp was writable after all: %s", res.Text)
	}
	res = call(t, kit, "run_command", `{"command":"echo ok > $TMPDIR/probe.txt && cat $TMPDIR/probe.txt"}`)
	if !strings.Contains(res.Text, "exit code: 0") {
		t.Errorf("$TMPDIR is not writable: %s", res.Text)
	}
	// The namespace tier has a private /tmp and pid namespace: no such lines.
	ns, err := sandbox.New(context.Background())
	if err != nil {
		sandboxtest.Unavailable(t, "namespace", err.Error())
	}
	defer ns.Close()
	if info := call(t, toolkit.ForSandbox(ns), "sandbox_info", `{}`).Text; strings.Contains(info, "temporary files:") || strings.Contains(info, "processes:") {
		t.Errorf("the namespace tier reports limits it does not have:\n%s", info)
	}
}

// TestPythonLongOutputHeadAndTail: the kernel kept the first 1 MiB of a run's output and
// dropped the rest, so the end of a long print loop was nowhere.
func TestPythonLongOutputHeadAndTail(t *testing.T) {
	sb := newSandbox(t)
	requirePython(t, sb)
	kit := toolkit.ForSandbox(sb)
	res := call(t, kit, "run_python", `{"code":"for i in range(1, 200001):\n    print(i)\n'done'"}`)
	if !strings.Contains(res.Text, "--- stdout ---\n1\n2\n3\n") || !strings.Contains(res.Text, "\n199999\n200000\n--- result ---\n'done'") {
		t.Errorf("the start and the end are not both shown:\n%.200s\n…\n%s", res.Text, res.Text[max(0, len(res.Text)-300):])
	}
	m := regexp.MustCompile(`\[… ([0-9,]+) lines \([0-9.]+ MB\) omitted; the whole output is in (\S+): read_file`).FindStringSubmatch(res.Text)
	if m == nil {
		t.Fatalf("no marker with the lines omitted and the file:\n%s", markerLines(res.Text))
	}
	omitted, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	shown := 0
	for _, l := range strings.Split(res.Text, "\n") {
		if _, err := strconv.Atoi(l); err == nil {
			shown++
		}
	}
	if shown+omitted != 200000 {
		t.Errorf("%d lines shown + %d said omitted = %d, want 200000", shown, omitted, shown+omitted)
	}
	wc, err := sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c", "wc -l < " + m[2] + " && tail -n 1 " + m[2]}})
	if err != nil || strings.Join(strings.Fields(wc.Stdout), " ") != "200000 200000" {
		t.Errorf("the saved file %s: %q %v, want 200000 lines ending in 200000", m[2], wc.Stdout, err)
	}
}

func TestShortPythonOutputLeavesNoFile(t *testing.T) {
	sb := newSandbox(t)
	requirePython(t, sb)
	kit := toolkit.ForSandbox(sb)
	call(t, kit, "run_python", `{"code":"print(1); 2"}`)
	if g, err := sb.Files.Glob(context.Background(), "**/*.txt", ".sandboxkit"); err == nil && len(g.Paths) > 0 {
		t.Errorf("files left for output shown whole: %v", g.Paths)
	}
}

// BenchmarkRunCommandOutputCapture measures what keeping the whole output costs a short
// run_command: the toolkit's call (the agent writes the output file, the toolkit removes it
// when everything was shown) against the floor of Commands.Run without a file, in one run.
//
//	go test -run '^$' -bench RunCommandOutputCapture ./toolkit
func BenchmarkRunCommandOutputCapture(b *testing.B) {
	sb := newSandbox(b)
	ctx := context.Background()
	b.Run("floor=Commands.Run", func(b *testing.B) {
		for b.Loop() {
			if _, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "true"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Commands.Run+OutputFile", func(b *testing.B) {
		for b.Loop() {
			if _, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "true", OutputFile: ".sandboxkit/outputs/b.txt"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("run_command", func(b *testing.B) {
		kit := toolkit.ForSandbox(sb)
		for b.Loop() {
			if res, err := kit.Call(ctx, "run_command", json.RawMessage(`{"command":"true"}`)); err != nil || res.IsError {
				b.Fatal(err, res.Text)
			}
		}
	})
}

// TestUnsavedOutputIsSaid: a failed save gave no path and no word about it.
func TestUnsavedOutputIsSaid(t *testing.T) {
	sb := newSandbox(t)
	requirePython(t, sb)
	// A file where the output directory should be: no output file can be made in it.
	if err := sb.Files.Write(context.Background(), "blocked", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	kit := toolkit.ForSandbox(sb, toolkit.OutputDir("blocked/outputs"))
	for _, c := range []struct{ tool, args string }{
		{"run_command", `{"command":"seq 1 200000"}`},
		{"bash", `{"command":"seq 1 200000"}`},
		{"run_python", `{"code":"for i in range(1, 200001): print(i)"}`},
	} {
		res := call(t, kit, c.tool, c.args)
		if res.IsError || !strings.HasSuffix(res.Text, "\n200000") {
			t.Errorf("%s: the command must run and show its end even when its output cannot be saved:\n%s", c.tool, markerLines(res.Text))
		}
		if !strings.Contains(markerLines(res.Text), "could not be saved") || strings.Contains(markerLines(res.Text), "whole output is in") {
			t.Errorf("%s: the marker does not say the output could not be saved:\n%s", c.tool, markerLines(res.Text))
		}
	}
}
