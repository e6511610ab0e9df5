package toolkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The local backend's launcher thread lives as long as the process by design.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/sandboxkit/sandboxkit/sandbox/local/isolate.OnLauncherThread.func1.1"))
}

type repeatIn struct {
	Text  string `json:"text" description:"text to repeat"`
	Times *int   `json:"times" description:"how often (default 2)"`
	Sep   string `json:"sep,omitempty" description:"separator"`
}

type repeatOut struct {
	Result string `json:"result"`
	Count  int    `json:"count"`
}

func (o repeatOut) ToolText() string { return fmt.Sprintf("%s (%d times)", o.Result, o.Count) }

func repeat(ctx context.Context, in repeatIn) (repeatOut, error) {
	n := 2
	if in.Times != nil {
		n = *in.Times
	}
	if n <= 0 {
		return repeatOut{}, fmt.Errorf("times must be at least 1, got %d", n)
	}
	return repeatOut{Result: strings.Repeat(in.Text+in.Sep, n-1) + in.Text, Count: n}, nil
}

type statOut struct {
	Name string   `json:"name"`
	Size int      `json:"size"`
	Tags []string `json:"tags"`
}

func newTestKit() *Toolkit {
	return Of(
		New("repeat", "Repeat text.", repeat, ReadOnly()),
		New("stat", "Describe the sandbox.", func(ctx context.Context, _ struct{}) (statOut, error) {
			return statOut{Name: "<box>", Size: 3, Tags: []string{"a"}}, nil
		}, ReadOnly(), Title("Sandbox info")),
	)
}

func TestCallAsAModelWould(t *testing.T) {
	k := newTestKit()
	tests := []struct {
		name      string
		tool      string
		args      string
		wantText  string
		wantError bool
	}{
		{"valid call", "repeat", `{"text":"ab","times":3,"sep":"-"}`, "ab-ab-ab (3 times)", false},
		{"optional fields left out", "repeat", `{"text":"ab"}`, "abab (2 times)", false},
		{"null for optional fields", "repeat", `{"text":"ab","times":null,"sep":null}`, "abab (2 times)", false},
		{"default text is indented JSON without HTML escapes", "stat", `{}`, "{\n  \"name\": \"<box>\",\n  \"size\": 3,\n  \"tags\": [\n    \"a\"\n  ]\n}", false},
		{"empty arguments for a tool without arguments", "stat", ``, "{\n  \"name\": \"<box>\",\n  \"size\": 3,\n  \"tags\": [\n    \"a\"\n  ]\n}", false},
		{"null arguments", "stat", `null`, "{\n  \"name\": \"<box>\",\n  \"size\": 3,\n  \"tags\": [\n    \"a\"\n  ]\n}", false},
		{"wrong type", "repeat", `{"text":"ab","times":"three"}`, `invalid arguments for repeat: argument "times": expected integer, got string "three"`, true},
		{"missing field", "repeat", `{"times":3}`, `invalid arguments for repeat: missing required argument "text" (string)`, true},
		{"extra field", "repeat", `{"text":"ab","count":3}`, `invalid arguments for repeat: unknown argument "count" (allowed: text, times, sep)`, true},
		{"misspelt field", "repeat", `{"txt":"ab"}`, `invalid arguments for repeat: missing required argument "text" (string); unknown argument "txt" (did you mean "text"? allowed: text, times, sep)`, true},
		{"malformed JSON", "repeat", `{"text":"ab"`, `invalid arguments for repeat: arguments are not valid JSON (input ends early after 12 bytes; is a closing brace or quote missing?); send one JSON object, e.g. {"name": "value"}`, true},
		{"arguments not an object", "repeat", `"ab"`, `invalid arguments for repeat: arguments must be a JSON object, got string "ab"`, true},
		{"unknown tool", "repeat_text", `{}`, `unknown tool "repeat_text"; available tools: repeat, stat`, true},
		{"tool function error", "repeat", `{"text":"ab","times":0}`, `repeat failed: times must be at least 1, got 0`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := k.Call(context.Background(), tt.tool, json.RawMessage(tt.args))
			if err != nil {
				t.Fatalf("Go error %v; model-correctable problems must be results", err)
			}
			if res.Text != tt.wantText {
				t.Errorf("text:\n got  %s\n want %s", res.Text, tt.wantText)
			}
			if res.IsError != tt.wantError {
				t.Errorf("IsError = %v, want %v", res.IsError, tt.wantError)
			}
			if tt.wantError && res.Data != nil {
				t.Errorf("error result carries Data %s", res.Data)
			}
			if !tt.wantError && !json.Valid(res.Data) {
				t.Errorf("Data is not JSON: %q", res.Data)
			}
		})
	}
}

func TestDataIsTheTypedOutput(t *testing.T) {
	res, err := newTestKit().Call(context.Background(), "repeat", json.RawMessage(`{"text":"x","times":2}`))
	if err != nil {
		t.Fatal(err)
	}
	var out repeatOut
	if err := json.Unmarshal(res.Data, &out); err != nil {
		t.Fatal(err)
	}
	if out != (repeatOut{Result: "xx", Count: 2}) {
		t.Errorf("Data decodes to %+v", out)
	}
}

type plot struct{ png []byte }

func (p *plot) ToolText() string    { return "1 plot" }
func (p *plot) ToolImages() []Image { return []Image{{MIMEType: "image/png", Data: p.png}} }

func TestImagesAndNilOutputs(t *testing.T) {
	k := Of(
		New("plot", "Draw.", func(ctx context.Context, _ struct{}) (*plot, error) { return &plot{png: []byte{0x89, 'P'}}, nil }),
		New("nothing", "Nothing.", func(ctx context.Context, _ struct{}) (*plot, error) { return nil, nil }),
	)
	res, err := k.Call(context.Background(), "plot", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "1 plot" || len(res.Images) != 1 || res.Images[0].MIMEType != "image/png" || string(res.Images[0].Data) != "\x89P" {
		t.Errorf("got %+v", res)
	}
	res, err = k.Call(context.Background(), "nothing", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "null" || string(res.Data) != "null" || res.IsError {
		t.Errorf("nil output: got %+v, want text and data null", res)
	}
}

type deadErr struct{}

func (deadErr) Error() string { return "SBX_DEAD: sandbox agent exited" }
func (deadErr) Fatal() bool   { return true }

type notFatalErr struct{}

func (notFatalErr) Error() string { return "no such file" }
func (notFatalErr) Fatal() bool   { return false }

func TestInfrastructureFailuresAreGoErrors(t *testing.T) {
	calls := 0
	k := Of(
		New("dead", "", func(ctx context.Context, _ struct{}) (string, error) {
			calls++
			return "", fmt.Errorf("run: %w", deadErr{})
		}),
		New("missing", "", func(ctx context.Context, _ struct{}) (string, error) { return "", notFatalErr{} }),
		New("wait", "", func(ctx context.Context, _ struct{}) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}),
	)

	t.Run("error with Fatal() true", func(t *testing.T) {
		res, err := k.Call(context.Background(), "dead", nil)
		var d deadErr
		if !errors.As(err, &d) || res.Text != "" {
			t.Errorf("got %+v, %v; want a Go error wrapping the fatal error", res, err)
		}
	})
	t.Run("error with Fatal() false is the model's", func(t *testing.T) {
		res, err := k.Call(context.Background(), "missing", nil)
		if err != nil || !res.IsError || res.Text != "missing failed: no such file" {
			t.Errorf("got %+v, %v", res, err)
		}
	})
	t.Run("context cancelled before the call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls = 0
		for _, name := range []string{"dead", "no_such_tool"} {
			_, err := k.Call(ctx, name, nil)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: err = %v, want context.Canceled", name, err)
			}
		}
		if calls != 0 {
			t.Error("the tool ran although the context was already cancelled")
		}
	})
	t.Run("context cancelled during the call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := k.Call(ctx, "wait", nil)
			done <- err
		}()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("tool error after the context ended keeps both causes", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tool := New("flaky", "", func(ctx context.Context, _ struct{}) (string, error) {
			cancel() // the caller gives up while the tool runs
			return "", errors.New("connection reset")
		})
		_, err := tool.Call(ctx, nil)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "connection reset") {
			t.Errorf("err = %v, want context.Canceled and the tool's words", err)
		}
	})
}

func TestToolkitRegistry(t *testing.T) {
	a := New("a", "", repeat)
	b := New("b", "", repeat)
	c := New("c", "", repeat)
	k := Of(a, b)
	if err := k.Add(c, New("a", "", repeat)); err == nil || err.Error() != `toolkit: duplicate tool name "a"` {
		t.Errorf("Add duplicate: %v", err)
	}
	if len(k.Tools()) != 2 {
		t.Error("a failed Add must add nothing")
	}
	if err := k.Add(c, New("d", "", repeat), New("d", "", repeat)); err == nil {
		t.Error("Add accepted a name twice in one call")
	}
	if err := k.Add(nil); err == nil {
		t.Error("Add accepted nil")
	}
	if err := k.Add(c); err != nil {
		t.Fatal(err)
	}
	if got := names(k.Tools()); got != "a,b,c" {
		t.Errorf("Tools = %s, want registration order", got)
	}
	k.Tools()[0] = nil // a copy: must not change the toolkit
	if got, ok := k.Lookup("a"); !ok || got != a {
		t.Error("Lookup(a) failed")
	}
	if _, ok := k.Lookup("z"); ok {
		t.Error("Lookup(z) found something")
	}
	sub, err := k.Subset("c", "a", "c")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(sub.Tools()); got != "c,a" {
		t.Errorf("Subset = %s, want c,a", got)
	}
	if res, _ := sub.Call(context.Background(), "b", nil); !res.IsError || !strings.Contains(res.Text, "available tools: c, a") {
		t.Errorf("subset still dispatches tools it does not hold: %+v", res)
	}
	if _, err := k.Subset("a", "x", "y"); err == nil || err.Error() != `toolkit: unknown tools "x", "y" (available: a, b, c)` {
		t.Errorf("Subset unknown: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Of with duplicate names did not panic")
		}
	}()
	Of(a, a)
}

func names(tools []*Tool) string {
	var s []string
	for _, t := range tools {
		s = append(s, t.Name())
	}
	return strings.Join(s, ",")
}

func TestUnknownToolInEmptyToolkit(t *testing.T) {
	var k Toolkit
	res, err := k.Call(context.Background(), strings.Repeat("x", 200), nil)
	if err != nil || !res.IsError || !strings.HasSuffix(res.Text, "…\"; available tools: (none)") {
		t.Errorf("got %+v, %v", res, err)
	}
	if err := k.Add(New("a", "", repeat)); err != nil {
		t.Errorf("zero Toolkit is not usable: %v", err)
	}
}

func TestNewPanicsOnProgrammerErrors(t *testing.T) {
	tests := []struct {
		name string
		make func()
	}{
		{"empty name", func() { New("", "", repeat) }},
		{"space in name", func() { New("run command", "", repeat) }},
		{"name too long", func() { New(strings.Repeat("a", 65), "", repeat) }},
		{"In not a struct", func() {
			New("x", "", func(ctx context.Context, s string) (string, error) { return s, nil })
		}},
		{"In a pointer", func() {
			New("x", "", func(ctx context.Context, in *repeatIn) (string, error) { return "", nil })
		}},
		{"In with a field JSON cannot carry", func() {
			New("x", "", func(ctx context.Context, in struct{ C chan int }) (string, error) { return "", nil })
		}},
		{"nil function", func() { New[repeatIn, string]("x", "", nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tt.make()
		})
	}
	New(strings.Repeat("a", 64), "", repeat) // the longest valid name
}

func TestToolDescribesItself(t *testing.T) {
	tool := New("repeat", "Repeat text.", repeat, ReadOnly(), Destructive(), Title("Repeat"))
	if tool.Name() != "repeat" || tool.Description() != "Repeat text." {
		t.Errorf("name/description: %q %q", tool.Name(), tool.Description())
	}
	if got := tool.Annotations(); got != (Annotations{Title: "Repeat", ReadOnly: true, Destructive: true}) {
		t.Errorf("annotations %+v", got)
	}
	wantSchema := `{"type":"object","properties":{"text":{"type":"string","description":"text to repeat"},"times":{"type":"integer","description":"how often (default 2)"},"sep":{"type":"string","description":"separator"}},"additionalProperties":false,"required":["text"]}`
	if string(tool.Schema()) != wantSchema {
		t.Errorf("schema:\n got  %s\n want %s", tool.Schema(), wantSchema)
	}
	strict, ok := tool.StrictSchema()
	wantStrict := `{"type":"object","properties":{"text":{"type":"string","description":"text to repeat"},"times":{"type":["integer","null"],"description":"how often (default 2)"},"sep":{"type":["string","null"],"description":"separator"}},"additionalProperties":false,"required":["text","times","sep"]}`
	if !ok || string(strict) != wantStrict {
		t.Errorf("strict (ok=%v):\n got  %s\n want %s", ok, strict, wantStrict)
	}
	withMap := New("env", "", func(ctx context.Context, in struct {
		Env map[string]string `json:"env"`
	}) (string, error) {
		return "", nil
	})
	if _, ok := withMap.StrictSchema(); ok {
		t.Error("a map argument was reported as strict-compatible")
	}
}

func TestConcurrentCalls(t *testing.T) {
	k := newTestKit()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				args := fmt.Sprintf(`{"text":"%d","times":%d}`, i, j%3+1)
				if res, err := k.Call(context.Background(), "repeat", json.RawMessage(args)); err != nil || res.IsError {
					t.Errorf("call %s: %+v %v", args, res, err)
				}
			}
		})
	}
	wg.Go(func() { _ = k.Add(New("late", "", repeat)) })
	wg.Wait()
}

// BenchmarkCall compares Toolkit.Call (lookup, validate, decode, run, encode, render) with
// calling the same function directly; the difference is the toolkit's overhead.
func BenchmarkCall(b *testing.B) {
	k := newTestKit()
	args := json.RawMessage(`{"text":"hello","times":3,"sep":" "}`)
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		three := 3
		for b.Loop() {
			if _, err := repeat(ctx, repeatIn{Text: "hello", Times: &three, Sep: " "}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("toolkit.Call", func(b *testing.B) {
		for b.Loop() {
			if res, err := k.Call(ctx, "repeat", args); err != nil || res.IsError {
				b.Fatal(res.Text, err)
			}
		}
	})
	b.Run("toolkit.Call_invalid_args", func(b *testing.B) {
		bad := json.RawMessage(`{"text":"hello","times":"three","extra":1}`)
		for b.Loop() {
			if res, _ := k.Call(ctx, "repeat", bad); !res.IsError {
				b.Fatal("accepted")
			}
		}
	})
}
