package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

var fastRequests = []FSReadRequest{
	{Path: "k.bin"},
	{Path: "dir/sub/file.go", MaxBytes: 10 << 20},
	{Path: "a", Offset: 3, Limit: 40, MaxBytes: 1},
	{Path: "", Offset: -1, Limit: 1 << 40, MaxBytes: -9223372036854775808},
	{Path: "x y~!#$%'()*+,-./:;=?@[]^_`{|}"},
	// encoding/json escapes these: no fast path.
	{Path: "a<b"}, {Path: `q"uote`}, {Path: `back\slash`}, {Path: "tab\t"}, {Path: "é"}, {Path: "\xff"},
}

var fastReplies = []FSReadReply{
	{Size: 1024, InBlob: true},
	{Size: 0},
	{Size: 5, Binary: true, InBlob: true, Lines: 3, More: true, Truncated: true},
	{Size: -1, Lines: -2},
	// Data in the JSON: no fast path.
	{Data: []byte("abc"), Size: 3}, {Data: []byte{}, Size: 0},
}

// The fast encoders write exactly what encoding/json writes (or decline),
// and the fast decoders read that back as encoding/json does.
func TestFastCodecsAgreeWithEncodingJSON(t *testing.T) {
	check := func(v any, fast []byte, ok bool, decoded any, decOK bool) {
		t.Helper()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if ok && !bytes.Equal(fast, want) {
			t.Errorf("%+v: fast %s, encoding/json %s", v, fast, want)
		}
		if ok && !decOK {
			t.Errorf("%+v: the fast decoder refused the fast encoder's %s", v, fast)
		}
		if decOK && !reflect.DeepEqual(decoded, v) {
			t.Errorf("%s: fast decoded %+v, want %+v", want, decoded, v)
		}
	}
	nfast := 0
	for _, r := range fastRequests {
		fast, ok := r.AppendJSONFast(nil)
		want, _ := json.Marshal(r)
		var d FSReadRequest
		decOK := d.UnmarshalFast(want)
		if ok {
			nfast++
		}
		check(r, fast, ok, d, decOK)
	}
	for _, r := range fastReplies {
		fast, ok := r.AppendJSONFast(nil)
		want, _ := json.Marshal(r)
		var d FSReadReply
		decOK := d.UnmarshalFast(want)
		if ok {
			nfast++
		}
		check(r, fast, ok, d, decOK)
	}
	if nfast != 9 {
		t.Errorf("%d values took the fast paths, want 9", nfast)
	}
}

func TestParseRequestFast(t *testing.T) {
	for _, tc := range []struct {
		in   string
		op   string
		args string
		ok   bool
	}{
		{`{"op":"fs.read","args":{"path":"k.bin","max_bytes":10}}`, "fs.read", `{"path":"k.bin","max_bytes":10}`, true},
		{`{"op":"ping"}`, "ping", "", true},
		{`{"op":"ping","args":{}}`, "ping", `{}`, true},
		{`{"op":"x","args":"a}\"b"}`, "x", `"a}\"b"`, true},
		{`{"op":"x","args":[1,{"a":"]"}]}`, "x", `[1,{"a":"]"}]`, true},
		{`{"op":"x","args":12}`, "x", `12`, true},
		// Other shapes go through encoding/json.
		{`{"op":"x","args":{"a":1},"extra":2}`, "", "", false},
		{`{"args":{},"op":"x"}`, "", "", false},
		{`{"op":"a\"b"}`, "", "", false},
		{`{"op":"x", "args":{}}`, "", "", false},
		{`{"op":""}`, "", "", false},
		{`{"op":"x","args":}`, "", "", false},
		{`{"op":"x","args":{"a":1}`, "", "", false},
	} {
		req, ok := ParseRequestFast([]byte(tc.in))
		if ok != tc.ok || req.Op != tc.op || string(req.Args) != tc.args {
			t.Errorf("ParseRequestFast(%s) = %q %s %v, want %q %s %v", tc.in, req.Op, req.Args, ok, tc.op, tc.args, tc.ok)
		}
	}
}

// Whatever a fast decoder accepts, encoding/json decodes to the same value
// (the fast paths never accept what the slow path would refuse or read
// otherwise).
func FuzzFastDecoders(f *testing.F) {
	for _, r := range fastRequests {
		b, _ := json.Marshal(r)
		f.Add(b)
		f.Add(append([]byte(`{"op":"fs.read","args":`), append(b, '}')...))
	}
	for _, r := range fastReplies {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"path":"a","offset":01}`))
	f.Add([]byte(`{"data":null,"size":1e3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr FSReadRequest
		if fr.UnmarshalFast(b) {
			var jr FSReadRequest
			if err := json.Unmarshal(b, &jr); err != nil || jr != fr {
				t.Errorf("%q: fast %+v, encoding/json %+v %v", b, fr, jr, err)
			}
		}
		var fp FSReadReply
		if fp.UnmarshalFast(b) {
			var jp FSReadReply
			if err := json.Unmarshal(b, &jp); err != nil || !reflect.DeepEqual(jp, fp) {
				t.Errorf("%q: fast %+v, encoding/json %+v %v", b, fp, jp, err)
			}
		}
		if req, ok := ParseRequestFast(b); ok && (len(req.Args) == 0 || json.Valid(req.Args)) {
			var jreq Request
			if err := json.Unmarshal(b, &jreq); err != nil || jreq.Op != req.Op || !bytes.Equal(jreq.Args, req.Args) {
				t.Errorf("%q: fast %q %s, encoding/json %q %s %v", b, req.Op, req.Args, jreq.Op, jreq.Args, err)
			}
		}
	})
}

// The fast encoders write a fixed list of fields: one added later to
// FSReadRequest or FSReadReply would be dropped from every small read in
// silence (review R6 of session 8). Every field, set by reflection to a
// value other than its zero, must come out as encoding/json writes it; a
// field of a kind this test cannot fill fails it, naming what to update.
func TestFastEncodersWriteEveryField(t *testing.T) {
	fill := func(v reflect.Value, skip string) {
		t.Helper()
		for i := 0; i < v.NumField(); i++ {
			f, name := v.Field(i), v.Type().Field(i).Name
			switch {
			case name == skip:
			case f.Kind() == reflect.String:
				f.SetString("v" + name)
			case f.CanInt():
				f.SetInt(int64(7 + i))
			case f.Kind() == reflect.Bool:
				f.SetBool(true)
			default:
				t.Fatalf("%s.%s is a %s: teach this test to fill it, and fast.go (AppendJSONFast, UnmarshalFast) to carry it", v.Type().Name(), name, f.Kind())
			}
		}
	}
	var req FSReadRequest
	fill(reflect.ValueOf(&req).Elem(), "")
	var rep FSReadReply
	fill(reflect.ValueOf(&rep).Elem(), "Data") // the fast reply is the one whose data is in a Blob
	for _, v := range []FastAppender{req, rep} {
		fast, ok := v.AppendJSONFast(nil)
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || !bytes.Equal(fast, want) {
			t.Errorf("%T with every field set: fast %s (ok %v), encoding/json %s: fast.go must carry every field", v, fast, ok, want)
		}
	}
	var dreq FSReadRequest
	if w, _ := json.Marshal(req); !dreq.UnmarshalFast(w) || dreq != req {
		t.Errorf("FSReadRequest with every field set: the fast decoder read %+v (or declined), want %+v", dreq, req)
	}
	var drep FSReadReply
	if w, _ := json.Marshal(rep); !drep.UnmarshalFast(w) || !reflect.DeepEqual(drep, rep) {
		t.Errorf("FSReadReply with every field set: the fast decoder read %+v (or declined), want %+v", drep, rep)
	}
}
