package schemas

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

type runArgs struct {
	Command string  `json:"command" description:"shell command to run"`
	Cwd     *string `json:"cwd" description:"working directory"`
	Timeout int     `json:"timeout_seconds,omitempty" jsonschema:"minimum=1,maximum=600"`
}

type fileArgs struct {
	Files []struct {
		Path string `json:"path"`
		Mode string `json:"mode,omitempty" jsonschema:"enum=r,enum=w"`
	} `json:"files"`
	Name  string  `json:"name,omitempty" jsonschema:"minLength=2,pattern=^[a-z]+$"`
	Small int8    `json:"small,omitempty"`
	Count uint    `json:"count,omitempty"`
	Label *string `json:"label,omitempty" jsonschema:"nullable"`
}

func validatorFor[T any](t testing.TB) *Validator {
	t.Helper()
	raw, err := For[T]()
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValidator(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDecodeErrorsAModelCanActOn(t *testing.T) {
	run := validatorFor[runArgs](t)
	files := validatorFor[fileArgs](t)
	tests := []struct {
		name string
		v    *Validator
		args string
		want string
	}{
		{"wrong type shows the value sent", run, `{"command":"ls","timeout_seconds":"ten"}`, `argument "timeout_seconds": expected integer, got string "ten"`},
		{"missing required field names its type", run, `{"cwd":"/tmp"}`, `missing required argument "command" (string)`},
		{"misspelt field suggests the right one", run, `{"comand":"ls"}`, `unknown argument "comand" (did you mean "command"? allowed: command, cwd, timeout_seconds); missing required argument "command" (string)`},
		{"extra field lists what is allowed", run, `{"command":"ls","verbose":true}`, `unknown argument "verbose" (allowed: command, cwd, timeout_seconds)`},
		{"differently cased name is unknown", run, `{"Command":"ls"}`, `unknown argument "Command" (did you mean "command"? allowed: command, cwd, timeout_seconds); missing required argument "command" (string)`},
		{"null for a required field", run, `{"command":null}`, `argument "command": expected string, got null`},
		{"below minimum", run, `{"command":"ls","timeout_seconds":0}`, `argument "timeout_seconds": expected a number >= 1, got number 0`},
		{"above maximum", run, `{"command":"ls","timeout_seconds":601}`, `argument "timeout_seconds": expected a number <= 600, got number 601`},
		{"fraction for an integer", run, `{"command":"ls","timeout_seconds":1.5}`, `argument "timeout_seconds": expected integer, got number 1.5`},
		{"malformed JSON", run, `{"command": "ls"`, `arguments are not valid JSON (input ends early after 16 bytes; is a closing brace or quote missing?); send one JSON object, e.g. {"name": "value"}`},
		{"syntax error says where", run, `{"command": ls}`, `arguments are not valid JSON (invalid character 'l' looking for beginning of value at byte 13); send one JSON object, e.g. {"name": "value"}`},
		{"two objects", run, `{"command":"a"}{"command":"b"}`, `arguments are not valid JSON (more data after the closing brace); send exactly one JSON object`},
		{"array instead of object", run, `["ls"]`, `arguments must be a JSON object, got an array of 1 item`},
		{"string instead of object", run, `"ls"`, `arguments must be a JSON object, got string "ls"`},
		{"long value is shortened", run, `{"command":["x"],"cwd":123456789012345678901234567890123456789012345678901234567890123456789}`, `argument "command": expected string, got an array of 1 item; argument "cwd": expected string, got number 123456789012345678901234567890123456789012345678901234567890…`},
		{"nested path with index", files, `{"files":[{"path":"a"},{"path":2}]}`, `argument "files[1].path": expected string, got number 2`},
		{"missing nested field", files, `{"files":[{}]}`, `missing required argument "files[0].path" (string)`},
		{"unknown nested field", files, `{"files":[{"path":"a","size":1}]}`, `unknown argument "files[0].size" (allowed: path, mode)`},
		{"enum", files, `{"files":[{"path":"a","mode":"x"}]}`, `argument "files[0].mode": expected one of "r", "w", got string "x"`},
		{"too short", files, `{"files":[],"name":"a"}`, `argument "name": expected at least 2 characters, got 1 characters`},
		{"pattern", files, `{"files":[],"name":"ABC"}`, `argument "name": expected a string matching the regular expression "^[a-z]+$", got string "ABC"`},
		{"nullable merges alternatives", files, `{"files":[],"label":5}`, `argument "label": expected string or null, got number 5`},
		{"out of range for int8 is caught after the schema", files, `{"files":[],"small":300}`, `argument "small": expected an integer from -128 to 127, got number 300`},
		{"negative for uint", files, `{"files":[],"count":-1}`, `argument "count": expected a non-negative integer, got number -1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.v == run {
				_, err = Decode[runArgs](tt.v, json.RawMessage(tt.args))
			} else {
				_, err = Decode[fileArgs](tt.v, json.RawMessage(tt.args))
			}
			var ae *ArgumentError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want *ArgumentError", err, err)
			}
			if err.Error() != tt.want {
				t.Errorf("got  %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestDecodeAcceptsWhatModelsSend(t *testing.T) {
	v := validatorFor[runArgs](t)
	tmp := "/tmp"
	tests := []struct {
		name string
		args string
		want runArgs
	}{
		{"all fields", `{"command":"ls","cwd":"/tmp","timeout_seconds":5}`, runArgs{Command: "ls", Cwd: &tmp, Timeout: 5}},
		{"null for optional fields means absent", `{"command":"ls","cwd":null,"timeout_seconds":null}`, runArgs{Command: "ls"}},
		{"surrounding whitespace", "\n {\"command\":\"ls\"} \n", runArgs{Command: "ls"}},
		{"integer written as 5.0", `{"command":"ls","timeout_seconds":5.0}`, runArgs{Command: "ls", Timeout: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode[runArgs](v, json.RawMessage(tt.args))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestEmptyArgumentsMeanEmptyObject(t *testing.T) {
	type noArgs struct{}
	v := validatorFor[noArgs](t)
	for _, args := range []string{"", "null", "  ", "{}"} {
		if _, err := Decode[noArgs](v, json.RawMessage(args)); err != nil {
			t.Errorf("Decode(%q): %v", args, err)
		}
	}
	_, err := Decode[noArgs](v, json.RawMessage(`{"x":1}`))
	if err == nil || err.Error() != `unknown argument "x" (this object takes no arguments)` {
		t.Errorf("got %v", err)
	}
}

func TestValidateReturnsNormalizedArguments(t *testing.T) {
	v := validatorFor[runArgs](t)
	got, err := v.Validate(json.RawMessage(`{"command":"ls","cwd":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"command":"ls"}` {
		t.Errorf("got %s, want the null optional removed", got)
	}
	got, err = v.Validate(nil)
	if err == nil {
		t.Errorf("empty arguments validated as %s, want missing command", got)
	}
}

func TestNewValidatorRejectsBrokenSchemas(t *testing.T) {
	for _, s := range []string{`{`, `{"type":12}`, `{"$ref":"#/nowhere"}`} {
		if _, err := NewValidator(json.RawMessage(s)); err == nil {
			t.Errorf("NewValidator(%s) succeeded", s)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	v := validatorFor[runArgs](b)
	args := json.RawMessage(`{"command":"ls -la","cwd":"/workspace","timeout_seconds":30}`)
	b.Run("validate+decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := Decode[runArgs](v, args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal only", func(b *testing.B) {
		for b.Loop() {
			var a runArgs
			if err := json.Unmarshal(args, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
}
