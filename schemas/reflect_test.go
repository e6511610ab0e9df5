package schemas

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type reflectInner struct {
	Path  string `json:"path" description:"file to read, relative to the workspace"`
	Limit *int   `json:"limit"`
}

type reflectEmbedded struct {
	Verbose bool `json:"verbose,omitempty"`
}

type reflectArgs struct {
	reflectEmbedded
	Command  string         `json:"command" jsonschema:"description=the shell command"`
	Cwd      *string        `json:"cwd" jsonschema_description:"working directory"`
	Timeout  int            `json:"timeout_seconds,omitempty" jsonschema:"minimum=1"`
	Must     *string        `json:"must" jsonschema:"required"`
	Mode     string         `json:"mode" jsonschema:"enum=fast,enum=slow"`
	Inner    reflectInner   `json:"inner"`
	Files    []reflectInner `json:"files,omitempty"`
	Hidden   string         `json:"-"`
	internal string
}

type tree struct {
	Name     string `json:"name"`
	Children []tree `json:"children,omitempty"`
}

func mustReflect[T any](t *testing.T) map[string]any {
	t.Helper()
	raw, err := For[T]()
	if err != nil {
		t.Fatalf("For: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("schema is not JSON: %v\n%s", err, raw)
	}
	return m
}

// dig walks map keys; it fails the test when a key is missing.
func dig(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("at %q: not an object: %v", k, v)
		}
		v, ok = m[k]
		if !ok {
			t.Fatalf("missing key %q in %v", k, m)
		}
	}
	return v
}

func strs(v any) []string {
	var out []string
	for _, e := range v.([]any) {
		out = append(out, e.(string))
	}
	return out
}

func TestReflectHouseStyle(t *testing.T) {
	s := mustReflect[reflectArgs](t)
	raw, _ := json.Marshal(s)
	for _, noise := range []string{"$schema", "$id", "$ref", "$defs"} {
		if strings.Contains(string(raw), noise) {
			t.Errorf("schema contains %s, which costs tokens and confuses models:\n%s", noise, raw)
		}
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"root is an object", s["type"], "object"},
		{"root refuses unknown arguments", s["additionalProperties"], false},
		{"nested struct refuses unknown keys", dig(t, s, "properties", "inner", "additionalProperties"), false},
		{"slice items refuse unknown keys", dig(t, s, "properties", "files", "items", "additionalProperties"), false},
		{"description tag", dig(t, s, "properties", "inner", "properties", "path", "description"), "file to read, relative to the workspace"},
		{"jsonschema description= keyword", dig(t, s, "properties", "command", "description"), "the shell command"},
		{"jsonschema_description tag", dig(t, s, "properties", "cwd", "description"), "working directory"},
		{"other jsonschema keywords still work", dig(t, s, "properties", "timeout_seconds", "minimum"), 1.0},
		{"enum", dig(t, s, "properties", "mode", "enum"), []any{"fast", "slow"}},
		{"embedded fields are promoted", dig(t, s, "properties", "verbose", "type"), "boolean"},
		{"required: plain fields and forced pointers only", strs(s["required"]), []string{"command", "must", "mode", "inner"}},
		{"required in nested struct skips pointers", strs(dig(t, s, "properties", "inner", "required")), []string{"path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
	props := dig(t, s, "properties").(map[string]any)
	for _, gone := range []string{"Hidden", "internal", "-"} {
		if _, ok := props[gone]; ok {
			t.Errorf("property %q should not be in the schema", gone)
		}
	}
}

func TestReflectKeepsFieldOrderAndTypeFirst(t *testing.T) {
	raw, err := For[reflectInner]()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","properties":{"path":{"type":"string","description":"file to read, relative to the workspace"},"limit":{"type":"integer"}},"additionalProperties":false,"required":["path"]}`
	if string(raw) != want {
		t.Errorf("got  %s\nwant %s", raw, want)
	}
}

func TestReflectDoesNotEscapeHTML(t *testing.T) {
	type args struct {
		Q string `json:"q" description:"use <tag> & co"`
	}
	raw, err := For[args]()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "use <tag> & co") {
		t.Errorf("description was escaped: %s", raw)
	}
}

func TestReflectRecursiveTypeUsesDefs(t *testing.T) {
	raw, err := For[tree]()
	if err != nil {
		t.Fatal(err)
	}
	s := map[string]any{}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s["type"] != "object" || dig(t, s, "properties", "children", "items", "$ref") != "#/$defs/tree" {
		t.Fatalf("recursive type should be an inline object whose children refer to $defs: %s", raw)
	}
	v, err := NewValidator(raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode[tree](v, json.RawMessage(`{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Children[0].Children[0].Name != "c" {
		t.Errorf("decoded %+v", got)
	}
	_, err = Decode[tree](v, json.RawMessage(`{"name":"a","children":[{"children":[{"name":1}]}]}`))
	want := `argument "children[0].children[0].name": expected string, got number 1; missing required argument "children[0].name" (string)`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

func TestReflectRejectsNonStructs(t *testing.T) {
	type withChan struct {
		C chan int `json:"c"`
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[int](), reflect.TypeFor[[]string](), reflect.TypeFor[withChan](), nil} {
		if _, err := Reflect(typ); err == nil {
			t.Errorf("Reflect(%v) succeeded, want an error", typ)
		}
	}
	if _, err := Reflect(reflect.TypeFor[*reflectInner]()); err != nil {
		t.Errorf("pointer to struct: %v", err)
	}
}
