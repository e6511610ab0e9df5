package langchaingo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tmc/langchaingo/tools"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// Tools wraps every tool of tk as a langchaingo tools.Tool, in registration order. See the
// package doc for how input is accepted and failures reported.
func Tools(tk *toolkit.Toolkit) []tools.Tool {
	all := tk.Tools()
	out := make([]tools.Tool, 0, len(all))
	for _, t := range all {
		out = append(out, newTool(tk, t))
	}
	return out
}

// agentTool is one toolkit tool behind langchaingo's tools.Tool interface.
type agentTool struct {
	tk          *toolkit.Toolkit // calls go through it, so its policy decides them
	t           *toolkit.Tool
	description string
	bareField   string // the one required string argument a bare input fills, or ""
	fields      string // "code, timeout_s", for error messages
}

var _ tools.Tool = (*agentTool)(nil)

func newTool(tk *toolkit.Toolkit, t *toolkit.Tool) *agentTool {
	s := parseSchema(t.Schema())
	names, _ := s.props()
	return &agentTool{
		tk:          tk,
		t:           t,
		bareField:   s.bareField(),
		fields:      strings.Join(names, ", "),
		description: t.Description() + "\n\n" + describeInput(s),
	}
}

// Name returns the tool's name.
func (a *agentTool) Name() string { return a.t.Name() }

// Description returns the tool's description followed by the compact schema of its input.
func (a *agentTool) Description() string { return a.description }

// Call runs the tool. The returned error is non-nil only for infrastructure failures.
func (a *agentTool) Call(ctx context.Context, input string) (string, error) {
	args, problem := a.arguments(input)
	if problem != "" {
		return fmt.Sprintf("invalid input for %s: %s. Send one JSON object with the fields %s.", a.t.Name(), problem, a.fields), nil
	}
	res, err := a.tk.Call(ctx, a.t.Name(), args)
	if err != nil {
		return "", err
	}
	text := res.Text
	if text == "" {
		text = "(no output)"
	}
	if n := len(res.Images); n > 0 {
		text += fmt.Sprintf("\n[%d image(s) produced; they cannot be shown here]", n)
	}
	return text, nil
}

// arguments turns an agent's input into the tool's arguments JSON, unwrapping the ways
// agents wrap it. problem is non-empty when no reading of input gives a JSON object.
func (a *agentTool) arguments(input string) (json.RawMessage, string) {
	cur := input  // the current layer, untrimmed: a bare value keeps its exact text
	for range 3 { // each round removes one layer of wrapping
		s := strings.TrimSpace(cur)
		switch {
		case s == "" || s == "null":
			return json.RawMessage("{}"), ""
		case s[0] == '{':
			var obj map[string]json.RawMessage
			if err := json.Unmarshal([]byte(s), &obj); err != nil {
				if a.bareField != "" {
					return a.bare(cur), ""
				}
				return nil, "the input is not valid JSON (" + err.Error() + ")"
			}
			if inner, ok := obj["__arg1"]; ok && len(obj) == 1 && !a.hasField("__arg1") {
				cur = string(inner)
				continue
			}
			return json.RawMessage(s), ""
		case s[0] == '"':
			var inner string
			if err := json.Unmarshal([]byte(s), &inner); err != nil {
				if a.bareField != "" {
					return a.bare(cur), ""
				}
				return nil, "the input is a malformed JSON string (" + err.Error() + ")"
			}
			t := strings.TrimSpace(inner)
			if a.bareField != "" && !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, `"`) {
				return a.bare(inner), ""
			}
			cur = inner
		default:
			if a.bareField != "" {
				return a.bare(cur), ""
			}
			return nil, fmt.Sprintf("the input %q is not a JSON object", shorten(s, 60))
		}
	}
	return nil, "the input is wrapped in too many layers of JSON strings"
}

func (a *agentTool) hasField(name string) bool {
	for _, f := range strings.Split(a.fields, ", ") {
		if f == name {
			return true
		}
	}
	return false
}

// bare makes the arguments object for a tool whose single required argument is a string.
func (a *agentTool) bare(value string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{a.bareField: value})
	return b
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
