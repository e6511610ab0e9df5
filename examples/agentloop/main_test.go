package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/sandboxkit/sandboxkit/adapters/openaitools/openaitest"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// runMain runs the program with args and returns its exit status and what it printed.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	t.Logf("agentloop %s -> exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// workspace returns a new directory for a sandbox's workspace. Not t.TempDir: its parent is
// private (mode 700), and a namespace sandbox runs as an unprivileged uid that must reach it.
func workspace(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentloop-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// needMatplotlib skips without the demo's Python (or fails where SANDBOXKIT_REQUIRE names
// python, as in CI, which installs it).
func needMatplotlib(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run(); err != nil {
		reason := "/usr/bin/python3 cannot import matplotlib (apt-get install python3-matplotlib): " + err.Error()
		sandboxtest.Unavailable(t, "python", reason)
	}
}

// readmeCommand is the README's "run the main job" command.
const readmeCommand = "go run ./examples/agentloop --replay examples/agentloop/demo.jsonl"

// TestReplayOfTheShippedDemo runs the README's main job exactly as written there (from the
// repository's root, with the default workspace), the replay of demo.jsonl against a real
// sandbox, and checks what a user would look at: the files in the workspace, the trace and
// the answer.
func TestReplayOfTheShippedDemo(t *testing.T) {
	needMatplotlib(t)
	t.Chdir("../..")
	args := strings.Fields(readmeCommand)[3:]
	code, out, errOut := runMain(t, args...)
	ws := workspaceOf(out)
	if ws == "" {
		t.Fatalf("the trace names no workspace")
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
	}
	if !strings.HasPrefix(ws, os.TempDir()) {
		t.Errorf("the default workspace %s is not a new temporary directory", ws)
	}

	csv, err := os.ReadFile(filepath.Join(ws, "sales.csv"))
	if err != nil || string(csv) != demoCSV {
		t.Errorf("sales.csv = %q, %v; want the demo's data", csv, err)
	}
	report, err := os.ReadFile(filepath.Join(ws, "report.md"))
	if err != nil || string(report) != demoReport {
		t.Errorf("report.md = %q, %v; want the demo's report", report, err)
	}
	png, err := os.ReadFile(filepath.Join(ws, "sales.png"))
	if err != nil {
		t.Fatalf("sales.png: %v", err)
	}
	// A PNG starts with its signature and the IHDR chunk, which holds width and height.
	if len(png) < 24 || string(png[:8]) != "\x89PNG\r\n\x1a\n" || string(png[12:16]) != "IHDR" {
		t.Fatalf("sales.png is not a PNG (%d bytes)", len(png))
	}
	if w, h := binary.BigEndian.Uint32(png[16:20]), binary.BigEndian.Uint32(png[20:24]); w != 800 || h != 450 {
		t.Errorf("sales.png is %dx%d, want 800x450", w, h)
	}
	if len(png) < 10_000 {
		t.Errorf("sales.png has only %d bytes; a plot with three lines, a legend and a grid has more", len(png))
	}

	// The trace: the header, every step with its calls, the Python error the model corrected,
	// the real numbers, the final answer and the totals; no result differs from the recording,
	// and no colour on a pipe.
	for _, want := range []string{
		"sandbox   local, isolation ",
		"workspace " + ws,
		"model     gpt-4o-mini via replay of examples/agentloop/demo.jsonl (no network, no key)",
		"step 1 ", "→ write_file path=\"sales.csv\"", "← write_file",
		"→ run_python code=\"import csv", "18 rows; columns: ['month', 'region', 'units']",
		"KeyError: 'unit'",
		"North       898     11,225.00    +45.8%",
		"best month overall: 2026-06 with 419 units",
		"saved sales.png, 800x450 pixels", "images: 1",
		"→ run_command command=\"ls sales.csv sales.png report.md && head -n 1 report.md\"",
		"# Sales report, January to June 2026",
		"- Total: 2,033 units, EUR 25,412.50 of revenue at EUR 12.50 a unit.",
		"✓ answered after 8 steps · 7 tool calls · ",
		"files " + ws + ": report.md (", "sales.csv (329 B)", "sales.png (",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace lacks %q", want)
		}
	}
	if strings.Contains(out, "≠") || strings.Contains(out, "differed from the recording") {
		t.Errorf("a replayed tool result differs from the recorded one on this machine")
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("the trace has colour codes although stdout is not a terminal")
	}
}

// TestReplayWithoutMatplotlib shows what the README promises when the sandbox's Python has
// no matplotlib: the plot step fails, the trace marks the results that differ from the
// recording and names the missing package, and the exit status is 4. A package in the
// workspace that fails to import stands in for the missing one (the kernel imports from its
// working directory first), so this runs on any machine.
func TestReplayWithoutMatplotlib(t *testing.T) {
	ws := workspace(t)
	if err := os.Mkdir(filepath.Join(ws, "matplotlib"), 0o755); err != nil {
		t.Fatal(err)
	}
	stub := `raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")` + "\n"
	if err := os.WriteFile(filepath.Join(ws, "matplotlib", "__init__.py"), []byte(stub), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runMain(t, "--replay", demoPath, "--workspace", ws)
	if code != exitDiverged {
		t.Errorf("exit %d, want %d", code, exitDiverged)
	}
	for _, want := range []string{
		"ModuleNotFoundError: No module named 'matplotlib'",
		"≠ differs from the recording: line 2 is --- error ---",
		"≠ differs from the recording: line 1 is exit code: 2", // the final ls finds no sales.png
		"warning: 2 tool results differed from the recording",
		"The sandbox's Python lacks matplotlib (on Debian or Ubuntu: apt-get install python3-matplotlib).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "sales.png")); err == nil {
		t.Errorf("sales.png exists although matplotlib could not be imported")
	}
	// The steps that do not need matplotlib still ran for real.
	if b, err := os.ReadFile(filepath.Join(ws, "report.md")); err != nil || string(b) != demoReport {
		t.Errorf("report.md = %q, %v", b, err)
	}
}

// workspaceOf returns the workspace named in the trace's header.
func workspaceOf(trace string) string {
	for _, l := range strings.Split(trace, "\n") {
		if ws, ok := strings.CutPrefix(l, "workspace "); ok {
			return ws
		}
	}
	return ""
}

// writeTranscript writes records as a transcript file and returns its path.
func writeTranscript(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReplayFlagsAToolResultThatDiffers(t *testing.T) {
	path := writeTranscript(t,
		`{"kind":"start","model":"m","task":"say hi"}`,
		`{"kind":"turn","step":1,"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"run_command","arguments":"{\"command\":\"echo hi\"}"}}]}}`,
		`{"kind":"tool_result","step":1,"tool_call_id":"c1","tool":"run_command","content":"exit code: 0\n--- stdout ---\nbye"}`,
		`{"kind":"turn","step":2,"message":{"role":"assistant","content":"It said bye."}}`,
	)
	code, out, _ := runMain(t, "--replay", path, "--workspace", workspace(t))
	if code != exitDiverged {
		t.Errorf("exit %d, want %d (replay diverged)", code, exitDiverged)
	}
	for _, want := range []string{
		"≠ differs from the recording: line 3 is hi",
		"recorded: bye",
		"warning: 1 tool result differed from the recording",
		"It said bye.", // the recorded answer is still shown: it is what the model said
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace lacks %q", want)
		}
	}
}

func TestLiveRunIsRecordedAndReplays(t *testing.T) {
	srv := openaitest.New(t,
		openaitest.Reply{Text: "Writing it.", ToolCalls: []openaitest.ToolCall{{Name: "run_command", Arguments: `{"command":"echo hello > hi.txt && cat hi.txt","cwd":null,"timeout_seconds":null}`}}},
		openaitest.Text("I wrote hi.txt."),
	)
	ws := workspace(t)
	transcript := filepath.Join(t.TempDir(), "run.jsonl")
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_MODEL", "scripted")
	t.Setenv("OPENAI_API_KEY", openaitest.APIKey)
	code, out, errOut := runMain(t, "--workspace", ws, "--transcript", transcript, "--color", "always", "write hello to hi.txt")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want 0", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "hi.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("hi.txt = %q, %v", b, err)
	}
	for _, want := range []string{"scripted via " + srv.URL, "command=\"echo hello > hi.txt && cat hi.txt\"", "I wrote hi.txt.", "answered", "\x1b[1mstep 1\x1b[0m"} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace lacks %q", want)
		}
	}
	if strings.Contains(out, "cwd=") {
		t.Errorf("the trace shows the null optional arguments")
	}
	// The key reached the endpoint and nothing else: not the transcript, not the sandbox.
	if reqs := srv.Requests(); len(reqs) != 2 {
		t.Errorf("%d requests, want 2", len(reqs))
	}
	rec, err := os.ReadFile(transcript)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec, []byte(openaitest.APIKey)) {
		t.Errorf("the transcript holds the API key")
	}

	// The recording replays without the server, with the same result.
	srv.Close()
	ws2 := workspace(t)
	code, out, _ = runMain(t, "--replay", transcript, "--workspace", ws2)
	if code != exitOK || !strings.Contains(out, "I wrote hi.txt.") || strings.Contains(out, "≠") {
		t.Errorf("replay exit %d; want 0, the answer and no difference", code)
	}
	if b, err := os.ReadFile(filepath.Join(ws2, "hi.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("the replay's hi.txt = %q, %v", b, err)
	}
}

func TestStepLimitIsAClearStop(t *testing.T) {
	loop := openaitest.Call("run_command", `{"command":"true"}`)
	srv := openaitest.New(t, loop, loop)
	code, out, errOut := runMain(t, "--base-url", srv.URL, "--api-key", "k", "--max-steps", "2", "--workspace", workspace(t), "loop")
	if code != exitStopped || errOut != "" {
		t.Errorf("exit %d, stderr %q; want %d and nothing", code, errOut, exitStopped)
	}
	if !strings.Contains(out, "■ stopped: step limit reached (raise --max-steps) after 2 steps · 2 tool calls") {
		t.Errorf("the trace does not say the step limit stopped the run")
	}
}

func TestInterruptStopsTheRunningTool(t *testing.T) {
	srv := openaitest.New(t, openaitest.Call("run_command", `{"command":"touch started && sleep 300 && touch finished","timeout_seconds":600}`))
	ws := workspace(t)
	go func() {
		// Ctrl-C once the tool runs: run has installed its handler by then, so the signal
		// reaches it and not the test binary's default action.
		for range 3000 {
			if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
				if p, err := os.FindProcess(os.Getpid()); err == nil {
					_ = p.Signal(os.Interrupt)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	code, out, errOut := runMain(t, "--base-url", srv.URL, "--api-key", "k", "--workspace", ws, "sleep")
	if code != exitInterrupted || errOut != "" {
		t.Errorf("exit %d, stderr %q; want %d and nothing", code, errOut, exitInterrupted)
	}
	if !strings.Contains(out, "■ interrupted after 1 step · 0 tool calls") {
		t.Errorf("the trace does not say the run was interrupted")
	}
	if _, err := os.Stat(filepath.Join(ws, "finished")); err == nil {
		t.Errorf("the command ran to its end although the run was interrupted")
	}
}

func TestWeakerIsolationOnlyByName(t *testing.T) {
	path := writeTranscript(t,
		`{"kind":"start","model":"m","task":"where am I"}`,
		`{"kind":"turn","step":1,"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"sandbox_info","arguments":"{}"}}]}}`,
		`{"kind":"turn","step":2,"message":{"role":"assistant","content":"Here."}}`,
	)
	// The parent of t.TempDir() is private, so the namespace tier's unprivileged uid cannot
	// reach a workspace there: the strong tier is unavailable for this workspace.
	ws := filepath.Join(t.TempDir(), "ws")
	code, _, errOut := runMain(t, "--replay", path, "--workspace", ws)
	if code != exitFailed || !strings.Contains(errOut, "SBX_ISOLATION_UNAVAILABLE") || !strings.Contains(errOut, "--allow-weaker landlock,process") {
		t.Fatalf("exit %d, stderr %q; want a refusal that names --allow-weaker", code, errOut)
	}
	code, out, _ := runMain(t, "--replay", path, "--workspace", ws, "--allow-weaker", "landlock,process")
	if code != exitOK || !strings.Contains(out, "isolation process (not enforced: ") && !strings.Contains(out, "isolation landlock") {
		t.Errorf("exit %d; want 0 and the weaker tier named in the header", code)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	demo := demoPath
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no task", nil, "no task given"},
		{"no key for OpenAI", []string{"hello"}, "no API key"},
		{"bad base URL", []string{"--base-url", "localhost:11434", "hello"}, "is not an http(s) URL"},
		{"another task with --replay", []string{"--replay", demo, "something else"}, "replays the recorded task"},
		{"unknown backend", []string{"--base-url", "http://127.0.0.1:1/v1", "--backend", "vm", "hello"}, `--backend "vm"`},
		{"bad tier", []string{"--base-url", "http://127.0.0.1:1/v1", "--allow-weaker", "container", "hello"}, `"container" is not a tier weaker than namespace`},
		{"unknown flag", []string{"--frobnicate"}, "flag provided but not defined"},
		{"bad colour mode", []string{"--color", "rainbow", "hello"}, `--color "rainbow"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runMain(t, tt.args...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, exitUsage, tt.want)
			}
		})
	}
}

func TestReplayOfAMissingOrBadFile(t *testing.T) {
	code, _, errOut := runMain(t, "--replay", filepath.Join(t.TempDir(), "nope.jsonl"))
	if code != exitFailed || !strings.Contains(errOut, "no such file") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runMain(t, "--replay", writeTranscript(t, `{"kind":"turn"}`))
	if code != exitFailed || !strings.Contains(errOut, "transcript") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestColourOnlyOnATerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "xterm")
	tty := openPTY(t)
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeR.Close()
	defer pipeW.Close()
	tests := []struct {
		name string
		mode string
		w    *os.File
		env  string // NO_COLOR
		want bool
	}{
		{"auto on a terminal", "auto", tty, "", true},
		{"auto on a pipe", "auto", pipeW, "", false},
		{"auto on a terminal with NO_COLOR", "auto", tty, "1", false},
		{"always on a pipe", "always", pipeW, "", true},
		{"never on a terminal", "never", tty, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NO_COLOR", tt.env)
			if got := useColor(tt.mode, tt.w); got != tt.want {
				t.Errorf("useColor(%q) = %v, want %v", tt.mode, got, tt.want)
			}
		})
	}
}

// openPTY returns the terminal side of a new pseudo-terminal.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	return tty
}
