package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Validator checks tool arguments against one schema. It is safe for concurrent use.
type Validator struct {
	compiled *jsonschema.Schema
	tree     any // the schema as an ordered tree, for property lists and null handling
}

const schemaURL = "mem:///arguments.json"

// NewValidator compiles schema (JSON Schema draft 2020-12, as [Reflect] produces). The error is
// for the programmer: the schema itself is broken.
func NewValidator(schema json.RawMessage) (*Validator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("schemas: schema is not valid JSON: %w", err)
	}
	tree, err := parseTree(schema)
	if err != nil {
		return nil, fmt.Errorf("schemas: schema is not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("schemas: invalid schema: %w", err)
	}
	return &Validator{compiled: compiled, tree: tree}, nil
}

// ArgumentError says everything that is wrong with one set of arguments, in sentences a model
// can act on. Error joins them with "; ".
type ArgumentError struct {
	Problems []Problem
}

// Problem is one thing wrong with the arguments.
type Problem struct {
	// Path is the JSON path of the offending argument ("timeout_seconds", "files[2].path");
	// empty when the problem is with the arguments as a whole (not JSON, not an object).
	Path string
	// Message is the whole sentence, path included, e.g.
	// `argument "timeout_seconds": expected integer, got string "ten"`.
	Message string

	// want lets anyOf alternatives that differ only in type merge into one sentence.
	want []string
}

// maxProblemsShown bounds the sentences Error joins: arguments with thousands of mistakes (a
// model that sent a whole document as keys) make one readable error, not megabytes.
const maxProblemsShown = 10

func (e *ArgumentError) Error() string {
	n := min(len(e.Problems), maxProblemsShown)
	msgs := make([]string, n, n+1)
	for i, p := range e.Problems[:n] {
		msgs[i] = p.Message
	}
	if more := len(e.Problems) - n; more > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more problems", more))
	}
	return strings.Join(msgs, "; ")
}

func wholeProblem(format string, args ...any) *ArgumentError {
	return &ArgumentError{Problems: []Problem{{Message: fmt.Sprintf(format, args...)}}}
}

// Validate checks args and returns them normalized: empty input or JSON null becomes {}; an
// optional field (one not in its object's required list) sent as null is removed, because
// models in strict mode send null to mean "not given"; a whole number written as 5.0 where an
// integer is wanted becomes 5. The error, if any, is an *[ArgumentError].
func (v *Validator) Validate(args json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		trimmed = []byte("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(trimmed))
	if err != nil && strings.Contains(err.Error(), "after top-level value") {
		return nil, wholeProblem("arguments are not valid JSON (more data after the closing brace); send exactly one JSON object")
	}
	if err != nil {
		return nil, wholeProblem("arguments are not valid JSON (%s); send one JSON object, e.g. {\"name\": \"value\"}", jsonErrorText(err, trimmed))
	}
	if _, ok := inst.(map[string]any); !ok {
		return nil, wholeProblem("arguments must be a JSON object, got %s", describe(inst))
	}
	changed := normalize(inst, v.tree, v.tree, 0)
	if err := v.compiled.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, wholeProblem("arguments rejected: %v", err)
		}
		return nil, v.explain(ve, inst)
	}
	if changed {
		b, err := json.Marshal(inst)
		if err != nil {
			return nil, wholeProblem("arguments rejected: %v", err)
		}
		return b, nil
	}
	return trimmed, nil
}

// Decode validates args with v, then decodes them into a T. A problem the schema cannot see
// (a number too large for an int8, a negative number for a uint) is still reported as an
// *[ArgumentError]; unknown fields are refused even if the schema allowed them.
func Decode[T any](v *Validator, args json.RawMessage) (T, error) {
	var out T
	normalized, err := v.Validate(args)
	if err != nil {
		return out, err
	}
	dec := json.NewDecoder(bytes.NewReader(normalized))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		var zero T
		return zero, decodeProblem(err)
	}
	return out, nil
}

func decodeProblem(err error) *ArgumentError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &ArgumentError{Problems: []Problem{{
			Path:    te.Field,
			Message: fmt.Sprintf("argument %q: expected %s, got %s", te.Field, goTypeWord(te.Type.String()), te.Value),
		}}}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return wholeProblem("unknown argument %s", shorten(name))
	}
	return wholeProblem("arguments rejected: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// goTypeWord names a Go numeric type the way a model understands its limits.
func goTypeWord(t string) string {
	ranges := map[string]string{
		"int8": "an integer from -128 to 127", "int16": "an integer from -32768 to 32767",
		"int32": "an integer from -2147483648 to 2147483647", "uint": "a non-negative integer",
		"uint8": "an integer from 0 to 255", "uint16": "an integer from 0 to 65535",
		"uint32": "an integer from 0 to 4294967295", "uint64": "a non-negative integer",
		"int": "an integer", "int64": "an integer",
	}
	if r, ok := ranges[t]; ok {
		return r
	}
	return t
}

func jsonErrorText(err error, data []byte) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Sprintf("input ends early after %d bytes; is a closing brace or quote missing?", len(data))
	}
	return err.Error()
}

// normalize prepares inst for decoding into Go, following the schema tree, and reports
// whether it changed anything:
//   - a null-valued optional property is removed (strict-mode models send null for "not
//     given", and a Go non-pointer field cannot hold null anyway);
//   - an integral number written with a fraction or exponent (5.0, 1e3) where the schema wants
//     an integer is rewritten as an integer. JSON Schema calls 5.0 an integer; encoding/json
//     would refuse it for an int field.
func normalize(inst any, schema, root any, depth int) bool {
	s, ok := resolve(schema, root)
	if !ok || depth > 64 {
		return false
	}
	changed := false
	switch val := inst.(type) {
	case map[string]any:
		props, _ := s.vals["properties"].(*object)
		if props == nil {
			return false
		}
		required, _ := s.vals["required"].([]any)
		for k, child := range val {
			if child == nil && !slices.Contains(required, any(k)) {
				delete(val, k)
				changed = true
				continue
			}
			ps, ok := props.get(k)
			if !ok {
				continue
			}
			if n, ok := child.(json.Number); ok {
				if i, ok := integral(n, ps, root); ok {
					val[k] = i
					changed = true
				}
				continue
			}
			changed = normalize(child, ps, root, depth+1) || changed
		}
	case []any:
		items, ok := s.get("items")
		if !ok {
			return false
		}
		for i, e := range val {
			if n, ok := e.(json.Number); ok {
				if in, ok := integral(n, items, root); ok {
					val[i] = in
					changed = true
				}
				continue
			}
			changed = normalize(e, items, root, depth+1) || changed
		}
	}
	return changed
}

// integral returns n in plain integer form when schema wants an integer, n is written as a
// fraction or with an exponent, and its value is a whole number of sane size.
func integral(n json.Number, schema, root any) (json.Number, bool) {
	str := n.String()
	if !strings.ContainsAny(str, ".eE") || len(str) > 40 {
		return "", false
	}
	s, ok := resolve(schema, root)
	if !ok {
		return "", false
	}
	wantsInt := s.vals["type"] == "integer"
	if list, ok := s.vals["type"].([]any); ok {
		wantsInt = slices.Contains(list, any("integer"))
	}
	if !wantsInt {
		return "", false
	}
	r, ok := new(big.Rat).SetString(str)
	if !ok || !r.IsInt() || r.Num().BitLen() > 64 {
		return "", false
	}
	return json.Number(r.Num().String()), true
}

// resolve follows a local "$ref" (recursive types keep them) to the schema object it names.
func resolve(schema, root any) (*object, bool) {
	s, ok := schema.(*object)
	for range 8 { // refs to refs are rare; a loop must not hang
		if !ok {
			return nil, false
		}
		ref, isRef := s.vals["$ref"].(string)
		if !isRef {
			return s, true
		}
		target, found := pointer(root, strings.TrimPrefix(ref, "#"))
		if !found {
			return nil, false
		}
		s, ok = target.(*object)
	}
	return nil, false
}

// pointer resolves a JSON pointer ("/properties/in") inside the schema tree.
func pointer(root any, ptr string) (any, bool) {
	cur := root
	if ptr == "" {
		return cur, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case *object:
			v, ok := c.get(tok)
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

var printer = message.NewPrinter(language.English)

// explain turns the validator's error tree into one problem per leaf, sorted by path so the
// same mistake always reads the same way.
func (v *Validator) explain(ve *jsonschema.ValidationError, inst any) *ArgumentError {
	problems := v.leaves(ve, inst)
	slices.SortStableFunc(problems, func(a, b Problem) int { return strings.Compare(a.Path, b.Path) })
	problems = slices.CompactFunc(problems, func(a, b Problem) bool { return a.Message == b.Message })
	return &ArgumentError{Problems: problems}
}

func (v *Validator) leaves(e *jsonschema.ValidationError, inst any) []Problem {
	path := instancePath(e.InstanceLocation, inst)
	got, _ := valueAt(inst, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
		var out []Problem
		for _, c := range e.Causes {
			out = append(out, v.leaves(c, inst)...)
		}
		return out
	case *kind.AnyOf, *kind.OneOf:
		if len(e.Causes) == 0 {
			return []Problem{{Path: path, Message: fmt.Sprintf("%s: matches more than one allowed form; make it unambiguous", label(path))}}
		}
		return []Problem{v.alternatives(e, inst, path)}
	case *kind.Required:
		var out []Problem
		for _, m := range k.Missing {
			p := joinPath(path, m)
			msg := fmt.Sprintf("missing required argument %q", p)
			if t := v.propertyType(e.SchemaURL, m); t != "" {
				msg += " (" + t + ")"
			}
			out = append(out, Problem{Path: p, Message: msg})
		}
		return out
	case *kind.AdditionalProperties:
		allowed := v.propertyNames(e.SchemaURL)
		var out []Problem
		for _, name := range k.Properties {
			// The name is the model's input, echoed back: bounded (a 10 MB key made a 10 MB
			// error), and compared with the allowed names only when it could be a typo of one.
			p := shorten(joinPath(path, name))
			hint := "allowed: " + strings.Join(allowed, ", ")
			if len(allowed) == 0 {
				hint = "this object takes no arguments"
			}
			if len(name) <= 64 {
				if near := closest(name, allowed); near != "" {
					hint = fmt.Sprintf("did you mean %q? %s", near, hint)
				}
			}
			out = append(out, Problem{Path: p, Message: fmt.Sprintf("unknown argument %q (%s)", p, hint)})
		}
		return out
	case *kind.Type:
		return []Problem{{Path: path, Message: fmt.Sprintf("%s: expected %s, got %s", label(path), strings.Join(k.Want, " or "), describe(got)), want: k.Want}}
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			b, _ := json.Marshal(w)
			want[i] = string(b)
		}
		return []Problem{{Path: path, Message: fmt.Sprintf("%s: expected one of %s, got %s", label(path), strings.Join(want, ", "), describe(got))}}
	case *kind.Const:
		b, _ := json.Marshal(k.Want)
		return expect(path, "exactly "+string(b), got)
	case *kind.Minimum:
		return expect(path, "a number >= "+k.Want.RatString(), got)
	case *kind.Maximum:
		return expect(path, "a number <= "+k.Want.RatString(), got)
	case *kind.ExclusiveMinimum:
		return expect(path, "a number > "+k.Want.RatString(), got)
	case *kind.ExclusiveMaximum:
		return expect(path, "a number < "+k.Want.RatString(), got)
	case *kind.MultipleOf:
		return expect(path, "a multiple of "+k.Want.RatString(), got)
	case *kind.MinLength:
		return expectWorded(path, fmt.Sprintf("at least %d characters", k.Want), fmt.Sprintf("%d characters", k.Got))
	case *kind.MaxLength:
		return expectWorded(path, fmt.Sprintf("at most %d characters", k.Want), fmt.Sprintf("%d characters", k.Got))
	case *kind.MinItems:
		return expectWorded(path, fmt.Sprintf("at least %d items", k.Want), fmt.Sprintf("%d items", k.Got))
	case *kind.MaxItems:
		return expectWorded(path, fmt.Sprintf("at most %d items", k.Want), fmt.Sprintf("%d items", k.Got))
	case *kind.Pattern:
		return expect(path, fmt.Sprintf("a string matching the regular expression %q", k.Want), got)
	case *kind.Format:
		return expect(path, "a valid "+k.Want, got)
	default:
		return []Problem{{Path: path, Message: fmt.Sprintf("%s: %s (got %s)", label(path), e.ErrorKind.LocalizedString(printer), describe(got))}}
	}
}

// expect builds the common sentence: `argument "x": expected <want>, got <JSON value>`.
func expect(path, want string, got any) []Problem {
	return expectWorded(path, want, describe(got))
}

// expectWorded is expect when what was given is already put in words ("3 items").
func expectWorded(path, want, got string) []Problem {
	return []Problem{{Path: path, Message: fmt.Sprintf("%s: expected %s, got %s", label(path), want, got)}}
}

// alternatives explains a value that matched none of anyOf/oneOf. When every alternative
// failed only on type ("nullable" fields: string or null) it says so in one sentence.
func (v *Validator) alternatives(e *jsonschema.ValidationError, inst any, path string) Problem {
	var all []Problem
	for _, c := range e.Causes {
		all = append(all, v.leaves(c, inst)...)
	}
	var want []string
	onlyType := true
	for _, p := range all {
		if p.want == nil || p.Path != path {
			onlyType = false
			break
		}
		want = append(want, p.want...)
	}
	got, _ := valueAt(inst, e.InstanceLocation)
	if onlyType && len(want) > 0 {
		return Problem{Path: path, Message: fmt.Sprintf("%s: expected %s, got %s", label(path), strings.Join(want, " or "), describe(got)), want: want}
	}
	msgs := make([]string, len(all))
	for i, p := range all {
		msgs[i] = p.Message
	}
	return Problem{Path: path, Message: fmt.Sprintf("%s: matches none of the allowed forms: %s", label(path), strings.Join(msgs, "; or "))}
}

// schemaAt returns the schema object an error's SchemaURL points to.
func (v *Validator) schemaAt(u string) (*object, bool) {
	_, frag, _ := strings.Cut(u, "#")
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	n, ok := pointer(v.tree, frag)
	if !ok {
		return nil, false
	}
	return resolve(n, v.tree)
}

func (v *Validator) propertyNames(u string) []string {
	s, ok := v.schemaAt(u)
	if !ok {
		return nil
	}
	props, _ := s.vals["properties"].(*object)
	if props == nil {
		return nil
	}
	return slices.Clone(props.keys)
}

func (v *Validator) propertyType(u, name string) string {
	s, ok := v.schemaAt(u)
	if !ok {
		return ""
	}
	props, _ := s.vals["properties"].(*object)
	if props == nil {
		return ""
	}
	p, ok := props.get(name)
	if !ok {
		return ""
	}
	ps, ok := resolve(p, v.tree)
	if !ok {
		return ""
	}
	switch t := ps.vals["type"].(type) {
	case string:
		return t
	case []any:
		words := make([]string, 0, len(t))
		for _, w := range t {
			if s, ok := w.(string); ok {
				words = append(words, s)
			}
		}
		return strings.Join(words, " or ")
	}
	return ""
}

// label names what a sentence is about: `argument "x"` or, for the root, `arguments`.
func label(path string) string {
	if path == "" {
		return "arguments"
	}
	return fmt.Sprintf("argument %q", shorten(path))
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// instancePath renders a location as a JSON path: "files[2].path".
func instancePath(loc []string, inst any) string {
	var b strings.Builder
	cur := inst
	for _, tok := range loc {
		switch c := cur.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			var i int
			if _, err := fmt.Sscan(tok, &i); err == nil && i >= 0 && i < len(c) {
				cur = c[i]
			} else {
				cur = nil
			}
		case map[string]any:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
			cur = c[tok]
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
		}
	}
	return b.String()
}

func valueAt(inst any, loc []string) (any, bool) {
	cur := inst
	for _, tok := range loc {
		switch c := cur.(type) {
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		default:
			return nil, false
		}
	}
	return cur, true
}

// describe names a JSON value's type and, for scalars, the value itself (shortened), so the
// model sees what it actually sent.
func describe(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean %t", t)
	case json.Number:
		return "number " + shorten(t.String())
	case string:
		return "string " + shorten(fmt.Sprintf("%q", t))
	case []any:
		if len(t) == 1 {
			return "an array of 1 item"
		}
		return fmt.Sprintf("an array of %d items", len(t))
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func shorten(s string) string {
	const max = 60
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 { // stay on a UTF-8 boundary
		cut--
	}
	return s[:cut] + "…"
}

// closest returns the allowed name within a small edit distance of name, if exactly one is.
func closest(name string, allowed []string) string {
	best, bestD, ties := "", 3, 0
	for _, a := range allowed {
		d := editDistance(strings.ToLower(name), strings.ToLower(a))
		switch {
		case d < bestD:
			best, bestD, ties = a, d, 0
		case d == bestD:
			ties++
		}
	}
	if ties > 0 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99 // names this long are not typos worth the work
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
