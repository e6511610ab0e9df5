package schemas

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decode-and-validate path, as a confused or hostile
// model might. It must never panic; a failure must be an *ArgumentError with something to
// say; a success must survive a round trip (what we accepted, re-encoded, is accepted again
// and decodes to the same value).
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"x"`, `0`, `{"command":"ls"}`,
		`{"command":"ls","cwd":null,"timeout_seconds":5.0}`,
		`{"command":"ls","timeout_seconds":"ten"}`, `{"comand":"ls"}`,
		`{"command":"ls"`, `{"command":"a"}{"command":"b"}`,
		`{"files":[{"path":"a","mode":"r"},{"path":2}],"small":300,"count":-1,"label":null}`,
		`{"files":[],"name":"ab","label":"x","small":1e2}`,
		`{"files":[{"path":"\u0000\ud800"}]}`, `{"files":[[[[[[[[[[]]]]]]]]]]}`,
		`{"command":"ls","timeout_seconds":1e400}`,
	} {
		f.Add([]byte(seed))
	}
	run := validatorFor[runArgs](f)
	files := validatorFor[fileArgs](f)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRoundTrip[runArgs](t, run, data)
		checkRoundTrip[fileArgs](t, files, data)
	})
}

func checkRoundTrip[T any](t *testing.T, v *Validator, data []byte) {
	got, err := Decode[T](v, json.RawMessage(data))
	if err != nil {
		var ae *ArgumentError
		if !errors.As(err, &ae) || len(ae.Problems) == 0 {
			t.Fatalf("Decode(%q) failed with %v (%T), want an *ArgumentError with problems", data, err, err)
		}
		for _, p := range ae.Problems {
			if p.Message == "" {
				t.Fatalf("Decode(%q): empty problem message in %#v", data, ae)
			}
		}
		return
	}
	again, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("re-encoding %#v: %v", got, err)
	}
	got2, err := Decode[T](v, again)
	if err != nil {
		t.Fatalf("accepted %q but not its re-encoding %s: %v", data, again, err)
	}
	if !reflect.DeepEqual(got, got2) {
		t.Fatalf("round trip changed the value: %#v -> %#v", got, got2)
	}
}
