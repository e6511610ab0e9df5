package schemas

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type strictOptions struct {
	Depth   *int   `json:"depth"`
	Pattern string `json:"pattern"`
}

type strictArgs struct {
	Path    string          `json:"path"`
	Mode    string          `json:"mode,omitempty" jsonschema:"enum=read,enum=write"`
	Options *strictOptions  `json:"options"`
	Nested  strictOptions   `json:"nested"`
	Tags    []string        `json:"tags,omitempty"`
	Items   []strictOptions `json:"items"`
	Either  *string         `json:"either,omitempty" jsonschema:"oneof_type=string;integer"`
}

func strictOf[T any](t *testing.T) (map[string]any, []string, json.RawMessage) {
	t.Helper()
	raw, err := For[T]()
	if err != nil {
		t.Fatal(err)
	}
	out, reasons, err := Strict(raw)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("strict schema is not JSON: %v", err)
	}
	return m, reasons, out
}

func TestStrictTransform(t *testing.T) {
	s, reasons, raw := strictOf[strictArgs](t)
	if len(reasons) != 0 {
		t.Fatalf("reasons = %q, want none", reasons)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"every root property is required", s["required"], []any{"path", "mode", "options", "nested", "tags", "items", "either"}},
		{"required field keeps its plain type", dig(t, s, "properties", "path", "type"), "string"},
		{"optional pointer to struct becomes nullable", dig(t, s, "properties", "options", "type"), []any{"object", "null"}},
		{"nested struct under pointer lists all properties", dig(t, s, "properties", "options", "required"), []any{"depth", "pattern"}},
		{"optional pointer inside nested struct becomes nullable", dig(t, s, "properties", "nested", "properties", "depth", "type"), []any{"integer", "null"}},
		{"required field inside nested struct stays non-null", dig(t, s, "properties", "nested", "properties", "pattern", "type"), "string"},
		{"nested struct refuses unknown keys", dig(t, s, "properties", "nested", "additionalProperties"), false},
		{"optional slice becomes nullable", dig(t, s, "properties", "tags", "type"), []any{"array", "null"}},
		{"slice items keep their type", dig(t, s, "properties", "tags", "items", "type"), "string"},
		{"struct items are strict too", dig(t, s, "properties", "items", "items", "required"), []any{"depth", "pattern"}},
		{"optional enum gets null in type", dig(t, s, "properties", "mode", "type"), []any{"string", "null"}},
		{"optional enum gets null in enum", dig(t, s, "properties", "mode", "enum"), []any{"read", "write", nil}},
		{"oneOf becomes anyOf with null added", dig(t, s, "properties", "either", "anyOf"), []any{
			map[string]any{"type": "string"}, map[string]any{"type": "integer"}, map[string]any{"type": "null"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
	if strings.Contains(string(raw), "oneOf") {
		t.Errorf("oneOf left in strict schema: %s", raw)
	}
}

func TestStrictReportsWhatCannotBeStrict(t *testing.T) {
	type withMap struct {
		Env map[string]string `json:"env"`
	}
	type withAny struct {
		Value any `json:"value"`
	}
	type withRaw struct {
		Inner struct {
			Blob json.RawMessage `json:"blob"`
		} `json:"inner"`
	}
	type withAnyMap struct {
		Meta map[string]any `json:"meta,omitempty"`
	}
	tests := []struct {
		name string
		fn   func(t *testing.T) []string
		want string
	}{
		{"map of strings", func(t *testing.T) []string { _, r, _ := strictOf[withMap](t); return r }, "env: is a map"},
		{"any field", func(t *testing.T) []string { _, r, _ := strictOf[withAny](t); return r }, "value: accepts any value"},
		{"raw JSON in a nested struct", func(t *testing.T) []string { _, r, _ := strictOf[withRaw](t); return r }, "inner.blob: accepts any value"},
		{"map of any", func(t *testing.T) []string { _, r, _ := strictOf[withAnyMap](t); return r }, "meta: is a map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reasons := tt.fn(t)
			if len(reasons) != 1 || !strings.HasPrefix(reasons[0], tt.want) {
				t.Errorf("reasons = %q, want one starting %q", reasons, tt.want)
			}
		})
	}
}

func TestStrictReportsUnsupportedKeywordsAndNonObjectRoot(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		{"allOf", `{"type":"object","properties":{"a":{"allOf":[{"type":"string"}]}},"required":["a"]}`, `a: keyword "allOf"`},
		{"root not an object", `{"type":"string"}`, "(root): the root must be an object"},
		{"true schema", `{"type":"object","properties":{"a":true}}`, "a: accepts any value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, reasons, err := Strict(json.RawMessage(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			if len(reasons) == 0 || !strings.HasPrefix(reasons[0], tt.want) {
				t.Errorf("reasons = %q, want first starting %q", reasons, tt.want)
			}
		})
	}
	if _, _, err := Strict(json.RawMessage(`{"type":`)); err == nil {
		t.Error("Strict accepted broken JSON")
	}
}

// A model in strict mode sends every property, null for the ones it does not mean to set.
// The plain schema's validator must accept exactly that call and decode it as "not given".
func TestStrictStyleCallDecodesAgainstPlainSchema(t *testing.T) {
	raw, err := For[strictArgs]()
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValidator(raw)
	if err != nil {
		t.Fatal(err)
	}
	call := `{"path":"a.txt","mode":null,"options":null,"nested":{"depth":null,"pattern":"x"},"tags":null,"items":[{"depth":2,"pattern":"y"}],"either":null}`
	got, err := Decode[strictArgs](v, json.RawMessage(call))
	if err != nil {
		t.Fatalf("strict-style call rejected: %v", err)
	}
	two := 2
	want := strictArgs{Path: "a.txt", Nested: strictOptions{Pattern: "x"}, Items: []strictOptions{{Depth: &two, Pattern: "y"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
