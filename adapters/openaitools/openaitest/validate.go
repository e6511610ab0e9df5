package openaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The wire* types decode a request exactly enough to apply the API's rules: they keep
// presence (a missing content differs from an empty one) and raw schemas, which a decoded
// go-openai request loses.
type wireRequest struct {
	Model         string          `json:"model"`
	Messages      []wireMessage   `json:"messages"`
	Tools         *[]wireTool     `json:"tools"`
	Stream        bool            `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
	// ToolChoice and ParallelToolCalls are kept raw: only their presence is checked.
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
		Strict     *bool           `json:"strict"`
	} `json:"function"`
}

// maxTools is the most tools one request may declare.
const maxTools = 128

// functionName is the API's rule for function names.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// invalid builds the 400 error the API returns for a bad parameter.
func invalid(param, code, format string, args ...any) *APIError {
	e := &APIError{Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

// validate applies the rules of the real API that clients most often break. It returns nil
// when the request passes, and the error the API would send otherwise.
func validate(body []byte) (*wireRequest, *APIError) {
	var req wireRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, invalid("", "", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.) Detail: %v", err)
	}
	if req.Model == "" {
		return nil, invalid("model", "", "you must provide a model parameter")
	}
	if len(req.Messages) == 0 {
		return nil, invalid("messages", "", "[] is too short - 'messages'")
	}
	if len(req.StreamOptions) > 0 && !bytes.Equal(req.StreamOptions, []byte("null")) && !req.Stream {
		return nil, invalid("stream_options", "", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	if e := validateMessages(req.Messages); e != nil {
		return nil, e
	}
	if req.Tools == nil || len(*req.Tools) == 0 {
		// Settings about tools make no sense without tools; the API refuses them rather than
		// ignore them (a client that drops its tools on a later turn finds out here).
		for _, p := range []struct {
			name string
			raw  json.RawMessage
		}{{"tool_choice", req.ToolChoice}, {"parallel_tool_calls", req.ParallelToolCalls}} {
			if isPresent(p.raw) {
				return nil, invalid(p.name, "", "Invalid value for '%s': '%s' is only allowed when 'tools' are specified.", p.name, p.name)
			}
		}
	}
	if req.Tools != nil {
		if len(*req.Tools) == 0 {
			return nil, invalid("tools", "empty_array", "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty array instead.")
		}
		if n := len(*req.Tools); n > maxTools {
			return nil, invalid("tools", "array_above_max_length", "Invalid 'tools': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", maxTools, n)
		}
		for i, t := range *req.Tools {
			if e := validateTool(i, t); e != nil {
				return nil, e
			}
		}
	}
	return &req, nil
}

// validateMessages checks the roles, the required fields, and that tool calls and tool
// results pair up: the messages right after an assistant message with tool_calls must be
// tool messages answering each of its calls, and a tool message must answer one of them.
func validateMessages(msgs []wireMessage) *APIError {
	var (
		pending  map[string]bool // call ids of the open assistant message not yet answered
		openedAt int             // index of that assistant message
		callIDs  []string        // its call ids in order, for the error message
	)
	unanswered := func() *APIError {
		var missing []string
		for _, id := range callIDs {
			if pending[id] {
				missing = append(missing, id)
			}
		}
		return invalid(fmt.Sprintf("messages.[%d].role", openedAt), "",
			"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s",
			strings.Join(missing, ", "))
	}
	for i, m := range msgs {
		content := isPresent(m.Content)
		if content {
			if e := validateContent(i, m.Role, m.Content); e != nil {
				return e
			}
		}
		if m.Role != "tool" && len(pending) > 0 {
			return unanswered()
		}
		switch m.Role {
		case "system", "developer", "user":
			if !content {
				return invalid(fmt.Sprintf("messages.[%d].content", i), "", "Missing required parameter: 'messages.[%d].content'.", i)
			}
		case "assistant":
			if !content && len(m.ToolCalls) == 0 {
				return invalid(fmt.Sprintf("messages.[%d].content", i), "", "Missing required parameter: 'messages.[%d].content'.", i)
			}
			pending, callIDs, openedAt = nil, nil, i
			for j, c := range m.ToolCalls {
				if c.ID == "" {
					return invalid(fmt.Sprintf("messages.[%d].tool_calls.[%d].id", i, j), "", "Missing required parameter: 'messages.[%d].tool_calls.[%d].id'.", i, j)
				}
				if c.Type != "function" {
					return invalid(fmt.Sprintf("messages.[%d].tool_calls.[%d].type", i, j), "", "Invalid value: '%s'. Supported values are: 'function'.", c.Type)
				}
				if c.Function.Name == "" {
					return invalid(fmt.Sprintf("messages.[%d].tool_calls.[%d].function.name", i, j), "", "Missing required parameter: 'messages.[%d].tool_calls.[%d].function.name'.", i, j)
				}
				if pending == nil {
					pending = map[string]bool{}
				}
				pending[c.ID] = true
				callIDs = append(callIDs, c.ID)
			}
		case "tool":
			if m.ToolCallID == nil {
				return invalid(fmt.Sprintf("messages.[%d].tool_call_id", i), "", "Missing required parameter: 'messages.[%d].tool_call_id'.", i)
			}
			if !content {
				return invalid(fmt.Sprintf("messages.[%d].content", i), "", "Missing required parameter: 'messages.[%d].content'.", i)
			}
			if callIDs == nil || msgs[i-1].Role != "tool" && msgs[i-1].Role != "assistant" {
				return invalid(fmt.Sprintf("messages.[%d].role", i), "", "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			if !pending[*m.ToolCallID] {
				return invalid(fmt.Sprintf("messages.[%d].tool_call_id", i), "", "Invalid parameter: 'tool_call_id' of '%s' not found in 'tool_calls' of previous message.", *m.ToolCallID)
			}
			delete(pending, *m.ToolCallID)
		case "function":
			// The deprecated function role has no pairing rules worth enforcing here.
		default:
			return invalid(fmt.Sprintf("messages.[%d].role", i), "", "Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role)
		}
		if m.Role != "assistant" && m.Role != "tool" {
			callIDs = nil
		}
	}
	if len(pending) > 0 {
		return unanswered()
	}
	return nil
}

// partTypes lists the content part types each role may send.
var partTypes = map[string][]string{
	"user":      {"text", "image_url", "input_audio", "file"},
	"system":    {"text"},
	"developer": {"text"},
	"assistant": {"text", "refusal"},
	"tool":      {"text"},
}

// validateContent checks that content is a string or an array of parts of types the role
// may send (e.g. images only from the user).
func validateContent(i int, role string, raw json.RawMessage) *APIError {
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		return nil
	case '[':
	default:
		return invalid(fmt.Sprintf("messages.[%d].content", i), "invalid_type", "Invalid type for 'messages.[%d].content': expected one of a string or array of objects, but got %s instead.", i, jsonKind(raw))
	}
	var parts []struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return invalid(fmt.Sprintf("messages.[%d].content", i), "invalid_type", "Invalid type for 'messages.[%d].content': expected an array of objects with a 'type'.", i)
	}
	allowed, known := partTypes[role]
	if !known {
		return nil // the role itself is reported by the caller
	}
	for j, p := range parts {
		ok := false
		for _, a := range allowed {
			ok = ok || p.Type == a
		}
		if !ok {
			return invalid(fmt.Sprintf("messages.[%d].content.[%d].type", i, j), "invalid_value", "Invalid value: '%s'. Supported values for role '%s' are: '%s'.", p.Type, role, strings.Join(allowed, "', '"))
		}
	}
	return nil
}

func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// isPresent reports whether a JSON field was sent with a non-null value.
func isPresent(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// validateTool checks one entry of "tools": a function with a valid name and an object
// schema, which strict mode additionally requires to be closed and fully required.
func validateTool(i int, t wireTool) *APIError {
	if t.Type != "function" {
		return invalid(fmt.Sprintf("tools[%d].type", i), "invalid_value", "Invalid value: '%s'. Supported values are: 'function' and 'custom'.", t.Type)
	}
	if t.Function == nil {
		return invalid(fmt.Sprintf("tools[%d].function", i), "missing_required_parameter", "Missing required parameter: 'tools[%d].function'.", i)
	}
	name := t.Function.Name
	switch {
	case name == "":
		return invalid(fmt.Sprintf("tools[%d].function.name", i), "missing_required_parameter", "Missing required parameter: 'tools[%d].function.name'.", i)
	case len(name) > 64:
		return invalid(fmt.Sprintf("tools[%d].function.name", i), "string_above_max_length", "Invalid 'tools[%d].function.name': string too long. Expected a string with maximum length 64, but got a string with length %d instead.", i, len(name))
	case !functionName.MatchString(name):
		return invalid(fmt.Sprintf("tools[%d].function.name", i), "invalid_value", "Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
	}
	if !isPresent(t.Function.Parameters) {
		return nil // a function without parameters is allowed
	}
	param := fmt.Sprintf("tools[%d].function.parameters", i)
	var schema map[string]any
	if err := json.Unmarshal(t.Function.Parameters, &schema); err != nil {
		return invalid(param, "invalid_function_parameters", "Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got %s.", name, t.Function.Parameters)
	}
	if typ, _ := schema["type"].(string); typ != "object" {
		return invalid(param, "invalid_function_parameters", "Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"%v\"'.", name, schema["type"])
	}
	if t.Function.Strict != nil && *t.Function.Strict {
		if msg := strictProblem(schema, nil); msg != "" {
			return invalid(param, "invalid_function_parameters", "Invalid schema for function '%s': %s", name, msg)
		}
	}
	return nil
}

// strictProblem finds the first place where a schema breaks strict mode's two structural
// rules, walking every nested schema. path is the context the API names in its message.
func strictProblem(s map[string]any, path []string) string {
	context := "In context=(" + quoteJoin(path) + ")"
	props, hasProps := s["properties"].(map[string]any)
	if s["type"] == "object" || hasTypeObject(s["type"]) || hasProps {
		if ap, ok := s["additionalProperties"].(bool); !ok || ap {
			return context + ", 'additionalProperties' is required to be supplied and to be false."
		}
		required := map[string]bool{}
		if list, ok := s["required"].([]any); ok {
			for _, r := range list {
				if name, ok := r.(string); ok {
					required[name] = true
				}
			}
		} else if len(props) > 0 {
			return context + ", 'required' is required to be supplied and to be an array including every key in properties."
		}
		for _, k := range sortedKeys(props) {
			if !required[k] {
				return fmt.Sprintf("%s, 'required' is required to be supplied and to be an array including every key in properties. Missing '%s'.", context, k)
			}
		}
		for _, k := range sortedKeys(props) {
			if sub, ok := props[k].(map[string]any); ok {
				if msg := strictProblem(sub, append(append([]string(nil), path...), "properties", k)); msg != "" {
					return msg
				}
			}
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		if msg := strictProblem(items, append(append([]string(nil), path...), "items")); msg != "" {
			return msg
		}
	}
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		list, _ := s[kw].([]any)
		for j, v := range list {
			if sub, ok := v.(map[string]any); ok {
				if msg := strictProblem(sub, append(append([]string(nil), path...), kw, fmt.Sprint(j))); msg != "" {
					return msg
				}
			}
		}
	}
	for _, kw := range []string{"$defs", "definitions"} {
		defs, _ := s[kw].(map[string]any)
		for _, k := range sortedKeys(defs) {
			if sub, ok := defs[k].(map[string]any); ok {
				if msg := strictProblem(sub, append(append([]string(nil), path...), kw, k)); msg != "" {
					return msg
				}
			}
		}
	}
	return ""
}

// hasTypeObject reports whether a "type" given as a list (["object","null"]) includes object.
func hasTypeObject(t any) bool {
	list, _ := t.([]any)
	for _, v := range list {
		if v == "object" {
			return true
		}
	}
	return false
}

func quoteJoin(path []string) string {
	q := make([]string, len(path))
	for i, p := range path {
		q[i] = "'" + p + "'"
	}
	return strings.Join(q, ", ")
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
