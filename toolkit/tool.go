package toolkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"

	"github.com/sandboxkit/sandboxkit/schemas"
)

// Tool is one callable tool: its name, description, argument schema and the function behind
// it. Build it with [New]; a Tool is immutable and safe for concurrent calls.
type Tool struct {
	name        string
	description string
	schema      json.RawMessage
	strict      json.RawMessage
	strictOK    bool
	annotations Annotations
	call        func(ctx context.Context, args json.RawMessage) (Result, error)
}

// Annotations are hints about a tool's behaviour for clients that show or gate tools (MCP
// tool annotations). They are hints, not guarantees: nothing enforces them.
type Annotations struct {
	Title       string // a human-readable name for UIs
	ReadOnly    bool   // the tool does not modify anything
	Destructive bool   // the tool may delete or overwrite data
}

type toolOptions struct {
	annotations Annotations
}

// Option adjusts a tool built by [New].
type Option func(*toolOptions)

// ReadOnly marks the tool as not modifying anything (an annotation hint).
func ReadOnly() Option { return func(o *toolOptions) { o.annotations.ReadOnly = true } }

// Destructive marks the tool as one that may delete or overwrite (an annotation hint).
func Destructive() Option { return func(o *toolOptions) { o.annotations.Destructive = true } }

// Title sets the human-readable title shown by clients that display tools.
func Title(s string) Option { return func(o *toolOptions) { o.annotations.Title = s } }

// Result is what one tool call produced.
type Result struct {
	Text    string          // what the model reads
	Data    json.RawMessage // the typed output as JSON for code (nil when IsError)
	Images  []Image         // e.g. PNG plots from run_python
	IsError bool            // the call failed in a way the model can correct (bad args, tool error)
}

// Image is a picture a tool returns beside its text, e.g. a plot.
type Image struct {
	MIMEType string // e.g. "image/png"
	Data     []byte // the encoded image
}

// Texter is implemented by Out types that render their own text for the model. Without it
// the model reads Out itself when it is a string, and the indented JSON of Out otherwise.
type Texter interface {
	ToolText() string
}

// Imager is implemented by Out types that carry images for the model.
type Imager interface {
	ToolImages() []Image
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// New builds a tool from a typed function. The argument schema is derived from In's struct
// tags: json names; descriptions from `description:"..."`, `jsonschema_description:"..."` or
// `jsonschema:"description=..."`; other invopop `jsonschema` keywords (enum=, minimum=, ...).
// A field is optional when it is a pointer or tagged omitempty.
//
// Before fn runs, the arguments are validated against the schema (null for an optional field
// counts as absent) and decoded with unknown fields refused; fn never sees input that does
// not match In.
//
// New panics on programmer errors: a name that does not match ^[a-zA-Z0-9_-]{1,64}$ (the
// limit every model API shares), or an In that is not a struct.
func New[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error), opts ...Option) *Tool {
	if !validName.MatchString(name) {
		panic(fmt.Sprintf("toolkit.New: invalid tool name %q: must match %s", name, validName))
	}
	if fn == nil {
		panic(fmt.Sprintf("toolkit.New(%q): nil function", name))
	}
	inType := reflect.TypeFor[In]()
	if inType.Kind() != reflect.Struct {
		panic(fmt.Sprintf("toolkit.New(%q): In must be a struct, got %s", name, inType))
	}
	schema, err := schemas.Reflect(inType)
	if err != nil {
		panic(fmt.Sprintf("toolkit.New(%q): %v", name, err))
	}
	strict, reasons, err := schemas.Strict(schema)
	if err != nil {
		panic(fmt.Sprintf("toolkit.New(%q): %v", name, err))
	}
	validator, err := schemas.NewValidator(schema)
	if err != nil {
		panic(fmt.Sprintf("toolkit.New(%q): %v", name, err))
	}
	var o toolOptions
	for _, opt := range opts {
		opt(&o)
	}
	t := &Tool{
		name:        name,
		description: description,
		schema:      schema,
		strict:      strict,
		strictOK:    len(reasons) == 0,
		annotations: o.annotations,
	}
	t.call = func(ctx context.Context, args json.RawMessage) (Result, error) {
		in, err := schemas.Decode[In](validator, args)
		if err != nil {
			return errorResult(fmt.Sprintf("invalid arguments for %s: %v", name, err)), nil
		}
		out, err := fn(ctx, in)
		if err != nil {
			if fatal := asFatal(ctx, err); fatal != nil {
				return Result{}, fmt.Errorf("toolkit: tool %s: %w", name, fatal)
			}
			return errorResult(fmt.Sprintf("%s failed: %v", name, err)), nil
		}
		return render(name, out)
	}
	return t
}

// Name returns the tool's name, as the model calls it.
func (t *Tool) Name() string { return t.name }

// Description returns the description the model reads to decide when to use the tool.
func (t *Tool) Description() string { return t.description }

// Schema returns the JSON Schema of the arguments: an inline object with additionalProperties
// false and no $ref (except for recursive types). The caller must not modify it.
func (t *Tool) Schema() json.RawMessage { return t.schema }

// StrictSchema returns the OpenAI strict-mode form of the schema (every property required,
// optional ones nullable). ok is false when the arguments cannot be strict (a map, an any
// field); then send [Tool.Schema] with strict off. The reasons are in schemas.Strict.
func (t *Tool) StrictSchema() (json.RawMessage, bool) { return t.strict, t.strictOK }

// Annotations returns the behaviour hints given with [ReadOnly], [Destructive] and [Title].
func (t *Tool) Annotations() Annotations { return t.annotations }

// Call runs the tool with arguments JSON as a model sent it. Empty arguments ("" or "null")
// mean {}. Bad arguments and errors returned by the tool function are Results with IsError
// set; the error is non-nil only for infrastructure failures: ctx is done, or the tool's
// error has a Fatal() bool method returning true (a dead or closed sandbox).
func (t *Tool) Call(ctx context.Context, args json.RawMessage) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("toolkit: tool %s not run: %w", t.name, context.Cause(ctx))
	}
	return t.call(ctx, args)
}

func errorResult(text string) Result {
	return Result{Text: text, IsError: true}
}

// asFatal returns the error Call should return as a Go error, or nil when err is the model's
// to handle.
func asFatal(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if errors.Is(err, ctx.Err()) {
			return err
		}
		// Keep both: callers test errors.Is(err, context.Canceled) and also want the tool's words.
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	var f interface{ Fatal() bool }
	if errors.As(err, &f) && f.Fatal() {
		return err
	}
	return nil
}

// render builds the success Result: Data is the JSON of out, Text is ToolText(), the string
// itself or the indented JSON, Images come from ToolImages().
func render(name string, out any) (Result, error) {
	data, err := marshal(out, false)
	if err != nil {
		// A bug in the tool's Out type; the model cannot fix it, but it can carry on without it.
		return errorResult(fmt.Sprintf("%s ran but its result could not be encoded: %v", name, err)), nil
	}
	res := Result{Data: data}
	if isNil(out) {
		res.Text = "null"
		return res, nil
	}
	if tx, ok := out.(Texter); ok {
		res.Text = tx.ToolText()
	} else if v := reflect.ValueOf(out); v.Kind() == reflect.String {
		// A string is the text itself: JSON-quoted, the model would read escaped newlines
		// and quotes, and may copy them into its next call.
		res.Text = v.String()
	} else {
		indented, err := marshal(out, true)
		if err != nil {
			return errorResult(fmt.Sprintf("%s ran but its result could not be encoded: %v", name, err)), nil
		}
		res.Text = string(indented)
	}
	if im, ok := out.(Imager); ok {
		res.Images = im.ToolImages()
	}
	return res, nil
}

// isNil reports a nil pointer, map, slice or interface inside out, so a Texter method on a nil
// pointer is not called.
func isNil(out any) bool {
	if out == nil {
		return true
	}
	v := reflect.ValueOf(out)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// marshal encodes without HTML escaping: a model reading "\u003c" for "<" wastes tokens and
// may copy the escape into its next command.
func marshal(v any, indent bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
