package openaitest

import "testing"

// FuzzValidate feeds arbitrary bodies to the request checks: they must answer every input
// with a verdict, never panic, and accept nothing that lacks a model and messages.
func FuzzValidate(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	f.Add(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"a","content":"r"}],"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"anyOf":[{"type":"object"}]}},"$defs":{"d":{"items":{"properties":{}}}}}}}]}`)
	f.Add(`{"model":"m","messages":[{"role":"tool","tool_call_id":"a","content":"r"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, e := validate([]byte(body))
		if (req == nil) == (e == nil) {
			t.Fatalf("validate(%q) = %v, %v; want exactly one of request and error", body, req, e)
		}
		if req != nil && (req.Model == "" || len(req.Messages) == 0) {
			t.Errorf("accepted %q without a model or messages", body)
		}
	})
}
