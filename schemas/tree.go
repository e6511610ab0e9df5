package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// object is a JSON object that remembers key order. Schemas are read by people and by models,
// and property order follows the Go struct; a plain map would sort it alphabetically.
type object struct {
	keys []string
	vals map[string]any
}

func newObject() *object { return &object{vals: map[string]any{}} }

func (o *object) get(key string) (any, bool) {
	v, ok := o.vals[key]
	return v, ok
}

// set adds key at the end, or replaces its value in place.
func (o *object) set(key string, v any) {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

func (o *object) del(key string) {
	if _, ok := o.vals[key]; !ok {
		return
	}
	delete(o.vals, key)
	for i, k := range o.keys {
		if k == key {
			o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
			break
		}
	}
}

// parseTree decodes one JSON document into nil, bool, json.Number, string, []any and *object.
func parseTree(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := newObject()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				o.set(k, v)
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token() // ']'
			return arr, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// encodeTree writes v as compact JSON without HTML escaping: descriptions often contain
// <, > and &, and \u003c costs a model six characters for one.
func encodeTree(v any) []byte {
	var buf bytes.Buffer
	writeTree(&buf, v)
	return buf.Bytes()
}

func writeTree(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case *object:
		buf.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			writeTree(buf, t.vals[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeTree(buf, e)
		}
		buf.WriteByte(']')
	case string:
		writeString(buf, t)
	default:
		b, err := json.Marshal(t)
		if err != nil {
			// Only values produced by parseTree reach here, and those always marshal.
			panic(fmt.Sprintf("schemas: cannot encode %T: %v", t, err))
		}
		buf.Write(b)
	}
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // strings always encode
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

// typeFirst moves "type" to the front of every schema object, where a reader looks for it;
// invopop emits it after the properties.
func typeFirst(n any) {
	switch t := n.(type) {
	case *object:
		if i := indexOf(t.keys, "type"); i > 0 {
			copy(t.keys[1:i+1], t.keys[:i])
			t.keys[0] = "type"
		}
		for _, k := range t.keys {
			switch k {
			case "enum", "const", "default", "examples":
				// data, not schemas
			case "properties", "$defs", "patternProperties", "dependentSchemas":
				// maps of name -> schema: keep the names' order, tidy the schemas
				if m, ok := t.vals[k].(*object); ok {
					for _, name := range m.keys {
						typeFirst(m.vals[name])
					}
				}
			default:
				typeFirst(t.vals[k])
			}
		}
	case []any:
		for _, e := range t {
			typeFirst(e)
		}
	}
}

func indexOf(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return -1
}
