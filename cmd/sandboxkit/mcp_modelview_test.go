package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestMCPWhatTheModelSees runs issue 18's findings through `sandboxkit mcp`
// as a client's model meets them: long output, Python displays and
// contexts, sandbox_info, messages and argument descriptions.
func TestMCPWhatTheModelSees(t *testing.T) {
	c, _ := startStdio(t)
	t.Run("the end of long output and the whole of it in a file", func(t *testing.T) { checkLongOutput(t, c) })
	t.Run("python displays in order", func(t *testing.T) {
		out := c.ok(t, "run_python", map[string]any{"code": "display('DISP-ONE'); print('P'); 'RES-TWO'"})
		if !strings.Contains(out, "--- display ---\n'DISP-ONE'\n--- stdout ---\nP\n--- result ---\n'RES-TWO'") {
			t.Errorf("display, print and result not all shown in order:\n%s", out)
		}
	})
	t.Run("a new context_id creates a context", func(t *testing.T) {
		out := c.ok(t, "run_python", map[string]any{"code": "z = 3; z", "context_id": "second"})
		if !strings.Contains(out, "context: second (new") || !strings.Contains(out, "3") {
			t.Errorf("run_python in a new context:\n%s", out)
		}
		info := c.ok(t, "sandbox_info", nil)
		if !regexp.MustCompile(`python contexts: .*second \(1 run\)`).MatchString(info) {
			t.Errorf("sandbox_info does not list the context:\n%s", info)
		}
	})
	t.Run("sandbox_info says where temporary files go, and it holds", func(t *testing.T) {
		info := c.ok(t, "sandbox_info", nil)
		res := c.call(t, "run_command", map[string]any{"command": "echo ok > /tmp/probe-$$ && rm /tmp/probe-$$"})
		tmpWritable := strings.Contains(text(res), "exit code: 0")
		if says := strings.Contains(info, "/tmp is not writable here: use $TMPDIR"); says == tmpWritable {
			t.Errorf("sandbox_info says /tmp is not writable: %v, but writing there worked: %v\n%s", says, tmpWritable, info)
		}
		if !regexp.MustCompile(`command timeout: \S+ default`).MatchString(info) {
			t.Errorf("sandbox_info does not give the default timeout:\n%s", info)
		}
	})
	t.Run("messages in tool terms, echoed input bounded", func(t *testing.T) {
		res := c.call(t, "read_file", map[string]any{"path": "x", strings.Repeat("k", 10<<20): 1})
		if !res.IsError || len(text(res)) > 1000 {
			t.Errorf("an unknown 10 MB argument name: a %d byte error", len(text(res)))
		}
		res = c.call(t, "write_file", map[string]any{"path": "big", "content": strings.Repeat("x", 9<<20)})
		if !res.IsError || strings.Contains(text(res), "CopyIn") || !strings.Contains(text(res), "append") {
			t.Errorf("write_file over one write's size: %.300s", text(res))
		}
	})
	t.Run("every argument described", func(t *testing.T) {
		tools, err := c.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tool := range tools.Tools {
			var s struct {
				Properties map[string]struct{ Description string } `json:"properties"`
			}
			data, _ := json.Marshal(tool.InputSchema)
			json.Unmarshal(data, &s)
			for name, p := range s.Properties {
				n++
				if p.Description == "" {
					t.Errorf("%s.%s has no description", tool.Name, name)
				}
			}
		}
		if n < 40 {
			t.Errorf("only %d arguments listed", n)
		}
	})
}

// checkLongOutput: run_command and bash with 200,000 lines show the first and
// the last lines, the marker counts the lines left out and names the file,
// and the file holds every line; run_python shows the end too.
func checkLongOutput(t *testing.T, c *client) {
	t.Helper()
	for _, tool := range []string{"run_command", "bash"} {
		out := c.ok(t, tool, map[string]any{"command": "seq 1 200000"})
		if !strings.HasSuffix(out, "\n200000") || !strings.Contains(out, "\n1\n2\n3\n") {
			t.Errorf("%s: the start and the end are not both shown:\n%.200s\n…\n%s", tool, out, out[max(0, len(out)-200):])
		}
		m := regexp.MustCompile(`\[… ([0-9,]+) lines \([0-9.]+ MB\) omitted; the whole output is in (\S+): read_file`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no marker with the lines omitted and the file:\n%s", tool, out[len(out)/2-300:len(out)/2+300])
		}
		wc := c.ok(t, "run_command", map[string]any{"command": "wc -l < " + m[2] + "; tail -n 1 " + m[2]})
		if !strings.Contains(wc, "200000\n200000") {
			t.Errorf("%s: the saved file %s: %q, want 200000 lines ending in 200000", tool, m[2], wc)
		}
	}
	out := c.ok(t, "run_python", map[string]any{"code": "for i in range(1, 200001):\n    print(i)"})
	if !strings.HasSuffix(out, "\n200000") || !regexp.MustCompile(`\[… [0-9,]+ lines \([0-9.]+ MB\) omitted; the whole output is in \S+: read_file`).MatchString(out) {
		t.Errorf("run_python with 200,000 lines:\n%.200s\n…\n%s", out, out[max(0, len(out)-400):])
	}
}
