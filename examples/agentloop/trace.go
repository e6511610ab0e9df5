package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/agentloop"
	"github.com/sandboxkit/sandboxkit/sandbox"
)

// How much of each thing the trace shows: enough to follow the run, not the whole output
// (the transcript has everything).
const (
	argValueWidth = 60
	resultLines   = 7
	lineWidth     = 110
)

// ANSI styles, used only when colour is on.
const (
	styleBold   = "\x1b[1m"
	styleDim    = "\x1b[2m"
	styleCyan   = "\x1b[36m"
	styleGreen  = "\x1b[32m"
	styleYellow = "\x1b[33m"
	styleRed    = "\x1b[31m"
	styleReset  = "\x1b[0m"
)

// tracer prints a run's events as a readable live trace.
type tracer struct {
	w     io.Writer
	color bool
	// lineOpen says streamed text left a line unfinished; textShown that the current step
	// printed text (which a retry makes void).
	lineOpen, textShown bool
	steps               int
	// recorded maps tool call ids to the results a replayed transcript recorded; differ
	// counts the replayed results that came out otherwise.
	recorded map[string]string
	differ   int
	// missing are Python modules that differing results could not import.
	missing []string
}

func newTracer(w io.Writer, color bool) *tracer { return &tracer{w: w, color: color} }

// useColor decides whether the trace is coloured: always, never, or on a terminal when
// NO_COLOR is unset and TERM is not dumb.
func useColor(mode string, w io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (t *tracer) style(s, text string) string {
	if !t.color || text == "" {
		return text
	}
	return s + text + styleReset
}

func (t *tracer) printf(format string, args ...any) {
	t.endLine()
	fmt.Fprintf(t.w, format, args...)
}

// endLine finishes a line left open by streamed text.
func (t *tracer) endLine() {
	if t.lineOpen {
		fmt.Fprintln(t.w)
		t.lineOpen = false
	}
}

func (t *tracer) header(info sandbox.Info, workspace, model, endpoint, task string) {
	iso := info.Isolation.String()
	// The controls that keep the agent's commands off the host; resource limits that were
	// not asked for (cpu, disk) are not gaps.
	confining := []string{"filesystem", "network", "processes_visible", "syscalls", "environment"}
	var gaps []string
	for _, c := range info.Controls {
		if !c.Enforced && slices.Contains(confining, c.Name) && (c.Name != "network" || !info.Network) {
			gaps = append(gaps, c.Name)
		}
	}
	if len(gaps) > 0 {
		iso += t.style(styleYellow, " (not enforced: "+strings.Join(gaps, ", ")+")")
	}
	python := info.Python
	if python == "" {
		python = "none found"
	}
	t.printf("%s %s, isolation %s, python %s\n", t.style(styleBold, "sandbox  "), info.Backend, iso, python)
	if workspace == "" {
		workspace = "inside the backend, removed at the end (pass --workspace DIR to keep it)"
	}
	t.printf("%s %s\n", t.style(styleBold, "workspace"), workspace)
	t.printf("%s %s via %s\n", t.style(styleBold, "model    "), model, endpoint)
	t.printf("%s %s\n", t.style(styleBold, "task     "), indentRest(task, "          "))
}

func (t *tracer) warn(msg string) {
	t.printf("%s %s\n", t.style(styleYellow, "warning:"), msg)
}

// event prints one event; it is the agent's OnEvent.
func (t *tracer) event(e agentloop.Event) {
	switch e := e.(type) {
	case agentloop.StepStarted:
		t.textShown = false
		t.printf("\n%s %s\n", t.style(styleBold, fmt.Sprintf("step %d", e.Step)), t.style(styleDim, fmt.Sprintf("(%s, ~%s tokens)", count(e.Messages, "message"), thousands(e.EstimatedTokens))))
	case agentloop.TextDelta:
		t.text(e.Text)
	case agentloop.ToolCall:
		t.printf("  %s %s%s\n", t.style(styleCyan, "→"), t.style(styleCyan, e.Name), formatArgs(e.Arguments))
	case agentloop.ToolResult:
		lines := summarize(e.Content)
		t.printf("  %s %s %s\n", t.style(styleGreen, "←"), t.style(styleCyan, e.Name), t.style(styleDim, "("+round(e.Elapsed)+" for the step's calls)"))
		for _, l := range lines {
			t.printf("      %s\n", t.style(styleDim, l))
		}
		t.compare(e)
	case agentloop.Retry:
		void := ""
		if t.textShown {
			void = " (the text above is void)"
		}
		t.printf("  %s attempt %d failed: %s; retrying in %s%s\n", t.style(styleYellow, "↻"), e.Attempt, oneLine(e.Err.Error(), lineWidth), round(e.Wait), void)
	case agentloop.Shortened:
		t.printf("  %s shortened %d old tool output(s) to fit the context window (~%s → ~%s tokens)\n", t.style(styleYellow, "✂"), e.Messages, thousands(e.Before), thousands(e.After))
	case agentloop.Finished:
		t.finished(e)
	}
}

// text prints streamed assistant text, indented under its step.
func (t *tracer) text(s string) {
	for s != "" {
		if !t.lineOpen {
			fmt.Fprint(t.w, "  ")
			t.lineOpen, t.textShown = true, true
		}
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			fmt.Fprint(t.w, s)
			return
		}
		fmt.Fprintln(t.w, s[:i])
		t.lineOpen = false
		s = s[i+1:]
	}
}

func (t *tracer) finished(e agentloop.Finished) {
	r := e.Result
	t.steps = r.Steps
	tokens := fmt.Sprintf("%s tokens (%s prompt, %s completion)", thousands(r.Usage.TotalTokens), thousands(r.Usage.PromptTokens), thousands(r.Usage.CompletionTokens))
	if r.Usage.Estimated {
		tokens = "~" + tokens + ", partly estimated"
	}
	stats := fmt.Sprintf("%s · %s · %s · %s", count(r.Steps, "step"), count(r.ToolCalls, "tool call"), tokens, round(r.Elapsed))
	if r.Retries > 0 {
		stats += " · " + count(r.Retries, "retry")
	}
	var line string
	switch r.Reason {
	case agentloop.StopAnswered:
		line = t.style(styleGreen, "✓ answered") + " after " + stats
	case agentloop.StopCanceled:
		line = t.style(styleYellow, "■ interrupted") + " after " + stats
	case agentloop.StopError:
		line = t.style(styleRed, "✗ failed") + " after " + stats + "\n  " + oneLine(fmt.Sprint(e.Err), 4*lineWidth)
	default:
		line = t.style(styleYellow, "■ stopped: "+explain(r.Reason)) + " after " + stats
	}
	t.printf("\n%s\n", line)
}

// files lists what the workspace holds at the end, so the user knows where to look.
func (t *tracer) files(workspace string) {
	entries, err := os.ReadDir(workspace)
	if err != nil || len(entries) == 0 {
		return
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		name := e.Name()
		if e.IsDir() {
			name += "/"
		} else if info, err := e.Info(); err == nil {
			name += fmt.Sprintf(" (%s)", size(info.Size()))
		}
		names = append(names, name)
	}
	sort.Strings(names)
	t.printf("%s %s: %s\n", t.style(styleBold, "files"), workspace, strings.Join(names, ", "))
}

func explain(r agentloop.StopReason) string {
	switch r {
	case agentloop.StopMaxSteps:
		return "step limit reached (raise --max-steps)"
	case agentloop.StopTokenBudget:
		return "token budget spent (raise --max-tokens)"
	case agentloop.StopContextFull:
		return "the conversation no longer fits the context window (--context-window)"
	case agentloop.StopLength:
		return "the answer was cut at the model's output limit"
	case agentloop.StopRefused:
		return "the model refused"
	}
	return string(r)
}

// formatArgs renders a call's JSON arguments as key=value pairs in the model's order,
// long strings cut; JSON it cannot read is shown as is, since the model wrote it so.
func formatArgs(args string) string {
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return " " + oneLine(args, 2*argValueWidth) + " (not a JSON object)"
	}
	var b strings.Builder
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			break
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return " " + oneLine(args, 2*argValueWidth) + " (malformed JSON)"
		}
		if string(raw) == "null" {
			continue // strict mode sends every optional argument; unset ones are noise here
		}
		fmt.Fprintf(&b, " %v=%s", key, formatValue(raw))
	}
	if _, err := dec.Token(); err != nil {
		return " " + oneLine(args, 2*argValueWidth) + " (malformed JSON)"
	}
	return b.String()
}

func formatValue(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return oneLine(string(bytes.TrimSpace(raw)), argValueWidth)
	}
	lines := strings.Count(s, "\n")
	if strings.HasSuffix(s, "\n") {
		lines--
	}
	q := oneLine(fmt.Sprintf("%q", s), argValueWidth)
	if lines > 0 {
		q += fmt.Sprintf(" (%d lines)", lines+1)
	}
	return q
}

// summarize returns the lines of a tool result to show, cut to width: all of them when
// there are few, else the first ones, a line saying how many were left out, and the last
// one, which is where an error message or a final figure usually is.
func summarize(content string) []string {
	all := strings.Split(strings.TrimRight(content, "\n"), "\n")
	if len(all) > resultLines {
		head := all[:resultLines-2]
		skipped := fmt.Sprintf("… %d more lines …", len(all)-len(head)-1)
		all = append(append(head[:len(head):len(head)], skipped), all[len(all)-1])
	}
	lines := make([]string, len(all))
	for i, l := range all {
		lines[i] = oneLine(l, lineWidth)
	}
	return lines
}

// oneLine cuts s to width characters on one line.
func oneLine(s string, width int) string {
	s = strings.ReplaceAll(s, "\n", `\n`)
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

func indentRest(s, indent string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+indent)
}

func round(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// count says "1 step", "2 steps", "3 retries".
func count(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, noun[:len(noun)-1])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// compareWith makes the tracer check each tool result against the one rt recorded for the
// same call.
func (t *tracer) compareWith(rt *agentloop.Transcript) {
	t.recorded = make(map[string]string)
	for _, r := range rt.Records {
		if r.Kind == agentloop.KindToolResult {
			t.recorded[r.ToolCallID] = r.Content
		}
	}
}

// noModule finds the module a Python import could not find.
var noModule = regexp.MustCompile(`ModuleNotFoundError: No module named '([A-Za-z0-9_]+)`)

// replaySummary ends a replay's trace with a warning when tool results differed from the
// recording, naming the Python modules that were missing.
func (t *tracer) replaySummary() {
	if t.differ == 0 {
		return
	}
	t.printf("%s %s differed from the recording (marked ≠ above): the replayed model turns after them were written for the recorded results, so the answer above may not hold here.\n",
		t.style(styleYellow, "warning:"), count(t.differ, "tool result"))
	if len(t.missing) > 0 {
		var pkgs []string
		for _, m := range t.missing {
			pkgs = append(pkgs, "python3-"+strings.ToLower(m))
		}
		t.printf("         The sandbox's Python lacks %s (on Debian or Ubuntu: apt-get install %s).\n", strings.Join(t.missing, ", "), strings.Join(pkgs, " "))
	}
}

// diverged returns how many replayed tool results differed from the recording.
func (t *tracer) diverged() int { return t.differ }

// compare flags a replayed result that differs from the recorded one, showing the first
// line that differs. stderr sections are left out of the comparison: they carry warnings
// that come and go with the machine's state (a library building its cache on first use),
// while stdout, exit codes, results and Python errors say what the model reacted to.
func (t *tracer) compare(e agentloop.ToolResult) {
	if t.recorded == nil {
		return
	}
	want, ok := t.recorded[e.ID]
	if !ok {
		return
	}
	got, rec := withoutStderr(e.Content), withoutStderr(want)
	if got == rec {
		return
	}
	t.differ++
	if m := noModule.FindStringSubmatch(e.Content); m != nil && !slices.Contains(t.missing, m[1]) {
		t.missing = append(t.missing, m[1])
	}
	g, w := strings.Split(got, "\n"), strings.Split(rec, "\n")
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	line := func(l []string) string {
		if i < len(l) {
			return oneLine(l[i], lineWidth)
		}
		return "(end of output)"
	}
	t.printf("      %s line %d is %s\n", t.style(styleYellow, "≠ differs from the recording:"), i+1, line(g))
	t.printf("        %s %s\n", t.style(styleDim, "recorded:"), line(w))
}

// withoutStderr removes the "--- stderr ---" section of a rendered tool result.
func withoutStderr(s string) string {
	const header = "--- stderr ---\n"
	i := strings.Index(s, header)
	if i < 0 {
		return s
	}
	rest := s[i+len(header):]
	j := strings.Index(rest, "\n--- ")
	if j < 0 {
		return s[:i]
	}
	return s[:i] + rest[j+1:]
}
