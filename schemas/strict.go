package schemas

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Strict rewrites schema into the form OpenAI's strict mode (structured outputs) accepts:
//
//   - every object lists all its properties in required and has additionalProperties: false;
//   - a property that was optional becomes nullable instead (type [T, "null"], null added to
//     enum, or anyOf [..., {"type": "null"}] when it has no plain type), so a model says "absent"
//     by sending null. [Validator] treats null for an optional field as absent, so the plain
//     schema and the strict one accept the same calls;
//   - oneOf becomes anyOf.
//
// reasons lists, one sentence each, what cannot be strict: maps (objects with free-form keys),
// values of any type, and keywords strict mode rejects (allOf, not, if/then/else,
// patternProperties, ...). When reasons is not empty the caller should send the original
// schema with strict off; the returned schema is still the best-effort rewrite.
// err is set only when schema is not valid JSON.
func Strict(schema json.RawMessage) (strict json.RawMessage, reasons []string, err error) {
	tree, err := parseTree(schema)
	if err != nil {
		return nil, nil, fmt.Errorf("schemas: schema is not valid JSON: %w", err)
	}
	st := &strictor{}
	root, ok := tree.(*object)
	if !ok || root.vals["type"] != "object" {
		st.report("", "the root must be an object schema")
	}
	tree = st.node(tree, "")
	return encodeTree(tree), st.reasons, nil
}

type strictor struct{ reasons []string }

func (st *strictor) report(path, why string) {
	if path == "" {
		path = "(root)"
	}
	st.reasons = append(st.reasons, fmt.Sprintf("%s: %s", path, why))
}

// unsupported are keywords OpenAI's strict mode refuses; they turn off strict for the tool.
var unsupported = []string{
	"allOf", "not", "if", "then", "else", "patternProperties", "dependentRequired",
	"dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "propertyNames",
	"prefixItems", "contains",
}

// shapeKeywords are the keywords that constrain what a value may be; a schema with none of
// them accepts anything.
var shapeKeywords = []string{"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "items", "not"}

func (st *strictor) node(n any, path string) any {
	switch s := n.(type) {
	case bool:
		if s {
			st.report(path, "accepts any value (Go any or json.RawMessage), which cannot be strict")
		}
		return n
	case *object:
		st.object(s, path)
		return s
	default:
		return n
	}
}

func (st *strictor) object(s *object, path string) {
	if alts, ok := s.get("oneOf"); ok {
		// Rename in place so the key keeps its position.
		i := slices.Index(s.keys, "oneOf")
		s.keys[i] = "anyOf"
		delete(s.vals, "oneOf")
		s.vals["anyOf"] = alts
	}
	for _, kw := range unsupported {
		if _, ok := s.get(kw); ok {
			st.report(path, fmt.Sprintf("keyword %q is not supported in strict mode", kw))
		}
	}
	if !slices.ContainsFunc(shapeKeywords, func(k string) bool { _, ok := s.get(k); return ok }) {
		st.report(path, "accepts any value (Go any or json.RawMessage), which cannot be strict")
	}
	if defs, ok := s.get("$defs"); ok {
		if d, ok := defs.(*object); ok {
			for _, k := range d.keys {
				d.vals[k] = st.node(d.vals[k], "$defs."+k)
			}
		}
	}
	if alts, ok := s.get("anyOf"); ok {
		if list, ok := alts.([]any); ok {
			for i := range list {
				list[i] = st.node(list[i], path)
			}
		}
	}
	if items, ok := s.get("items"); ok {
		s.vals["items"] = st.node(items, path+"[]")
	}
	_, hasProps := s.get("properties")
	if s.vals["type"] == "object" || hasProps {
		st.properties(s, path)
	}
}

func (st *strictor) properties(s *object, path string) {
	ap, hasAP := s.get("additionalProperties")
	props, _ := s.vals["properties"].(*object)
	switch {
	case hasAP && ap != false:
		st.report(path, "is a map (an object with free-form keys), which cannot be strict")
	case !hasAP && props == nil:
		st.report(path, "is a map (an object with free-form keys), which cannot be strict")
	case !hasAP:
		s.set("additionalProperties", false)
	}
	if props == nil {
		return
	}
	var required []string
	if r, ok := s.vals["required"].([]any); ok {
		for _, name := range r {
			if n, ok := name.(string); ok {
				required = append(required, n)
			}
		}
	}
	all := make([]any, 0, len(props.keys))
	for _, k := range props.keys {
		p := st.node(props.vals[k], join(path, k))
		if !slices.Contains(required, k) {
			p = nullable(p)
		}
		props.vals[k] = p
		all = append(all, k)
	}
	s.set("required", all)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// nullable lets p also accept null, in the way strict mode understands.
func nullable(p any) any {
	s, ok := p.(*object)
	if !ok {
		return p // true already accepts null; false stays false
	}
	if enum, ok := s.vals["enum"].([]any); ok && !slices.Contains(enum, nil) {
		s.vals["enum"] = append(enum, nil)
	}
	switch t := s.vals["type"].(type) {
	case string:
		if t != "null" {
			s.vals["type"] = []any{t, "null"}
		}
		return s
	case []any:
		if !slices.Contains(t, "null") {
			s.vals["type"] = append(t, "null")
		}
		return s
	}
	if alts, ok := s.vals["anyOf"].([]any); ok {
		for _, a := range alts {
			if ao, ok := a.(*object); ok && ao.vals["type"] == "null" {
				return s
			}
		}
		s.vals["anyOf"] = append(alts, nullObject())
		return s
	}
	if _, ok := s.get("enum"); ok {
		return s // null was added to the enum
	}
	w := newObject()
	w.set("anyOf", []any{s, nullObject()})
	return w
}

func nullObject() *object {
	o := newObject()
	o.set("type", "null")
	return o
}
