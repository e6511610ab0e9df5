package schemas

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"
)

// For returns the argument schema of T, which must be a struct type. See [Reflect].
func For[T any]() (json.RawMessage, error) {
	return Reflect(reflect.TypeFor[T]())
}

// Reflect returns the JSON Schema of t's JSON form, as compact JSON, in the house style:
//
//   - the root is an inline object: no $schema, $id, $ref or $defs. Nested structs are inlined
//     too; only a recursive type (which cannot be inlined) keeps $defs and $ref.
//   - every struct has additionalProperties: false.
//   - a field's description comes from `description:"..."`, `jsonschema_description:"..."` or
//     `jsonschema:"description=..."`; the other invopop `jsonschema` keywords (enum=, minimum=,
//     default=, ...) work as invopop documents them.
//   - a field is required unless its type is a pointer or its json tag has omitempty or
//     omitzero; `jsonschema:"required"` forces it back to required.
//
// t may be a pointer to a struct. Any other kind is an error.
func Reflect(t reflect.Type) (json.RawMessage, error) {
	if t == nil {
		return nil, fmt.Errorf("schemas: nil type")
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("schemas: arguments must be a struct, got %s", t)
	}
	s, err := reflectSchema(t)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schemas: %s: %w", t, err)
	}
	// Round-trip through the ordered tree to drop HTML escaping and put "type" first.
	tree, err := parseTree(raw)
	if err != nil {
		return nil, fmt.Errorf("schemas: %s: %w", t, err)
	}
	typeFirst(tree)
	return encodeTree(tree), nil
}

func reflectSchema(t reflect.Type) (s *jsonschema.Schema, err error) {
	// invopop panics on types it cannot describe (chan, func, complex). Arguments come from
	// programmers, so turn that into an error naming the type.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("schemas: %s: %v", t, p)
		}
	}()
	recursive := isRecursive(t, nil)
	r := &jsonschema.Reflector{
		Anonymous:      true,
		ExpandedStruct: !recursive,
		// Inlining a recursive type would never end, so those keep references.
		DoNotReference: !recursive,
		LookupComment:  descriptionTag,
	}
	s = r.ReflectFromType(t)
	s.Version = ""
	s.ID = ""
	if recursive {
		// The root is a $ref into $defs; models and OpenAI want an object at the root. Copy the
		// root definition up and keep $defs so self-references still resolve.
		name := strings.TrimPrefix(s.Ref, "#/$defs/")
		if def, ok := s.Definitions[name]; ok {
			defs := s.Definitions
			*s = *def
			s.Definitions = defs
		}
	}
	fixRequired(t, s, s.Definitions, map[*jsonschema.Schema]bool{})
	return s, nil
}

// descriptionTag lets a plain `description:"..."` tag describe a field; invopop only reads its
// own tags and Go comments.
func descriptionTag(t reflect.Type, field string) string {
	if field == "" || t.Kind() != reflect.Struct {
		return ""
	}
	f, ok := t.FieldByName(field)
	if !ok {
		return ""
	}
	return f.Tag.Get("description")
}

// isRecursive reports whether struct type t can reach itself through fields.
func isRecursive(t reflect.Type, stack []reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	if slices.Contains(stack, t) {
		return true
	}
	stack = append(stack, t)
	for i := range t.NumField() {
		if isRecursive(t.Field(i).Type, stack) {
			return true
		}
	}
	return false
}

// fixRequired walks the Go type beside its schema and drops pointer fields from required:
// invopop requires every field without omitempty, but a pointer is how Go says "optional".
func fixRequired(t reflect.Type, s *jsonschema.Schema, defs jsonschema.Definitions, seen map[*jsonschema.Schema]bool) {
	if s == nil {
		return
	}
	if s.Ref != "" {
		s = defs[strings.TrimPrefix(s.Ref, "#/$defs/")]
		if s == nil {
			return
		}
	}
	if len(s.OneOf) > 0 && s.Type == "" { // `jsonschema:"nullable"` wraps the real schema
		for _, alt := range s.OneOf {
			fixRequired(t, alt, defs, seen)
		}
		return
	}
	if seen[s] {
		return
	}
	seen[s] = true
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if s.Properties != nil {
			fixFields(t, s, defs, seen)
		}
	case reflect.Slice, reflect.Array:
		fixRequired(t.Elem(), s.Items, defs, seen)
	case reflect.Map:
		fixRequired(t.Elem(), s.AdditionalProperties, defs, seen)
		for _, p := range s.PatternProperties {
			fixRequired(t.Elem(), p, defs, seen)
		}
	}
}

// fixFields follows invopop's rules for naming and embedding fields (those of encoding/json).
func fixFields(t reflect.Type, s *jsonschema.Schema, defs jsonschema.Definitions, seen map[*jsonschema.Schema]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		jsonTags := strings.Split(f.Tag.Get("json"), ",")
		schemaTags := strings.Split(f.Tag.Get("jsonschema"), ",")
		if jsonTags[0] == "-" || schemaTags[0] == "-" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if (f.Anonymous && jsonTags[0] == "" && ft.Kind() == reflect.Struct) || slices.Contains(jsonTags[1:], "inline") {
			fixFields(ft, s, defs, seen)
			continue
		}
		if !f.Anonymous && !f.IsExported() {
			continue
		}
		name := f.Name
		if jsonTags[0] != "" {
			name = jsonTags[0]
		}
		if f.Type.Kind() == reflect.Pointer && !slices.Contains(schemaTags, "required") {
			s.Required = slices.DeleteFunc(s.Required, func(r string) bool { return r == name })
		}
		if prop, ok := s.Properties.Get(name); ok {
			fixRequired(f.Type, prop, defs, seen)
		}
	}
}
