package langchaingo

import (
	"bytes"
	"encoding/json"
	"strings"
)

// schema is the part of a JSON Schema the compact description shows. Nested schemas stay raw
// so the declared order of properties (the struct's field order, chosen by the tool's
// author) survives; a decoded map would sort it away.
type schema struct {
	Type                 json.RawMessage   `json:"type"`
	Description          string            `json:"description"`
	Enum                 []json.RawMessage `json:"enum"`
	Const                json.RawMessage   `json:"const"`
	Default              json.RawMessage   `json:"default"`
	Items                json.RawMessage   `json:"items"`
	Properties           json.RawMessage   `json:"properties"`
	AdditionalProperties json.RawMessage   `json:"additionalProperties"`
	Required             []string          `json:"required"`
	AnyOf                []json.RawMessage `json:"anyOf"`
	OneOf                []json.RawMessage `json:"oneOf"`
}

func parseSchema(raw json.RawMessage) *schema {
	var s schema
	if json.Unmarshal(raw, &s) != nil {
		return &schema{}
	}
	return &s
}

// props returns the property names in declared order and their schemas.
func (s *schema) props() ([]string, map[string]json.RawMessage) {
	var m map[string]json.RawMessage
	if json.Unmarshal(s.Properties, &m) != nil || len(m) == 0 {
		return nil, nil
	}
	return objectKeys(s.Properties), m
}

// objectKeys lists the keys of a JSON object in the order they appear in the text.
func objectKeys(raw json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return keys
		}
		key, _ := tok.(string)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
		keys = append(keys, key)
	}
	return keys
}

// types returns the non-null type names of the schema.
func (s *schema) types() []string {
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(s.Type, &many)
	out := many[:0]
	for _, t := range many {
		if t != "null" {
			out = append(out, t)
		}
	}
	return out
}

func (s *schema) isRequired(name string) bool {
	for _, r := range s.Required {
		if r == name {
			return true
		}
	}
	return false
}

// bareField returns the name of the only required property when it is a plain string: the
// one case in which an input that is not JSON has a single sensible meaning.
func (s *schema) bareField() string {
	if len(s.Required) != 1 {
		return ""
	}
	_, m := s.props()
	p := parseSchema(m[s.Required[0]])
	if t := p.types(); len(t) != 1 || t[0] != "string" || len(p.Enum) > 0 {
		return ""
	}
	return s.Required[0]
}

// describeInput renders the compact schema appended to a tool's description. A model reads
// it to build the JSON it puts in __arg1, so it is written like documentation: one field a
// line, nested objects inline.
func describeInput(s *schema) string {
	names, props := s.props()
	if len(names) == 0 {
		return "Input: {} (the tool takes no arguments)."
	}
	var b strings.Builder
	b.WriteString("Input: one JSON object; fields marked * are required:")
	for _, name := range names {
		p := parseSchema(props[name])
		b.WriteString("\n- " + name)
		if s.isRequired(name) {
			b.WriteString("*")
		}
		b.WriteString(": " + typeOf(p, 0))
		if p.Description != "" {
			b.WriteString(" — " + p.Description)
		}
		if len(p.Default) > 0 {
			b.WriteString(" (default " + string(p.Default) + ")")
		}
	}
	return b.String()
}

// typeOf renders a schema as a short type expression: string, [integer], "a"|"b",
// {x*: number, y: string}, {string: integer}.
func typeOf(s *schema, depth int) string {
	if len(s.Enum) > 0 {
		var alts []string
		for _, v := range s.Enum {
			if string(v) != "null" {
				alts = append(alts, string(v))
			}
		}
		return strings.Join(alts, "|")
	}
	if len(s.Const) > 0 {
		return string(s.Const)
	}
	if alts := append(s.AnyOf, s.OneOf...); len(alts) > 0 {
		var out []string
		for _, raw := range alts {
			sub := parseSchema(raw)
			if t := sub.types(); len(t) == 0 && string(sub.Type) != "" {
				continue // the null branch of an optional field
			}
			out = append(out, typeOf(sub, depth))
		}
		return strings.Join(out, "|")
	}
	var out []string
	for _, t := range s.types() {
		switch t {
		case "array":
			if len(s.Items) == 0 {
				out = append(out, "[any]")
			} else {
				out = append(out, "["+typeOf(parseSchema(s.Items), depth+1)+"]")
			}
		case "object":
			out = append(out, objectType(s, depth))
		default:
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return "any"
	}
	return strings.Join(out, "|")
}

func objectType(s *schema, depth int) string {
	names, props := s.props()
	if len(names) == 0 {
		if ap := parseSchema(s.AdditionalProperties); len(s.AdditionalProperties) > 0 && s.AdditionalProperties[0] == '{' {
			return "{string: " + typeOf(ap, depth+1) + "}"
		}
		return "object"
	}
	if depth >= 3 {
		return "object" // deeper nesting is noise in a description
	}
	parts := make([]string, 0, len(names))
	for _, name := range names {
		mark := ""
		if s.isRequired(name) {
			mark = "*"
		}
		parts = append(parts, name+mark+": "+typeOf(parseSchema(props[name]), depth+1))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
