package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// These tests run the server in-process over an InProcessTransport and
// over the go-sdk's HTTP transport, with small toolkits made for each test, to pin down
// the adapter's own behaviour: sessions, releases, error mapping and
// progress. cmd/sandboxkit's tests drive the same server with real
// sandboxes through the built binary.

// bound is the longest any single step of these tests may take before it
// counts as hung.
const bound = 30 * time.Second

// deadErr is what a tool returns when its sandbox is gone.
type deadErr struct{}

func (deadErr) Error() string { return "the sandbox died" }
func (deadErr) Fatal() bool   { return true }

// factory makes a small toolkit per session and counts creations and
// releases. Each toolkit has its own counter, so a test can tell which
// toolkit served a call.
type factory struct {
	created, released atomic.Int32
	fail              error         // returned by every creation when set
	progressWait      chan struct{} // closed by the test to let "wait" return
}

type countIn struct{}
type countOut struct {
	Kit   int `json:"kit"`
	Count int `json:"count"`
}

func (o countOut) ToolText() string { return fmt.Sprintf("kit %d count %d", o.Kit, o.Count) }

type plotOut struct{}

func (plotOut) ToolText() string { return "" }
func (plotOut) ToolImages() []toolkit.Image {
	return []toolkit.Image{{MIMEType: "image/png", Data: []byte("\x89PNG fake")}}
}

type echoIn struct {
	Text string `json:"text" description:"what to echo"`
}

func (f *factory) make(ctx context.Context) (*toolkit.Toolkit, func(), error) {
	if f.fail != nil {
		return nil, nil, f.fail
	}
	kit := int(f.created.Add(1))
	var count atomic.Int32
	var released atomic.Bool
	tk := toolkit.Of(
		toolkit.New("count", "Count calls.", func(ctx context.Context, _ countIn) (countOut, error) {
			return countOut{Kit: kit, Count: int(count.Add(1))}, nil
		}),
		toolkit.New("echo", "Echo text.", func(ctx context.Context, in echoIn) (countOut, error) {
			if in.Text == "fail" {
				return countOut{}, errors.New("asked to fail")
			}
			return countOut{Kit: kit}, nil
		}, toolkit.ReadOnly()),
		toolkit.New("plot", "An image.", func(ctx context.Context, _ countIn) (plotOut, error) { return plotOut{}, nil }),
		toolkit.New("die", "Lose the sandbox.", func(ctx context.Context, _ countIn) (countOut, error) {
			return countOut{}, deadErr{}
		}, toolkit.Destructive()),
		toolkit.New("wait", "Block until released or cancelled.", func(ctx context.Context, _ countIn) (countOut, error) {
			select {
			case <-f.progressWait:
				return countOut{Kit: kit}, nil
			case <-ctx.Done():
				return countOut{}, ctx.Err()
			}
		}),
	)
	return tk, func() {
		if released.Swap(true) {
			panic("release called twice")
		}
		f.released.Add(1)
	}, nil
}

// connect runs srv over an InProcessTransport and connects a client to
// it. It returns the client session and a channel that yields Run's
// result.
func connect(t *testing.T, srv *Server, opts *sdk.ClientOptions) (*sdk.ClientSession, <-chan error) {
	t.Helper()
	return connectOver(t, srv, opts, func() (sdk.Transport, sdk.Transport) { return NewInProcessTransports() })
}

// connectOver is connect over the transports pair() makes (client end
// first).
func connectOver(t *testing.T, srv *Server, opts *sdk.ClientOptions, pair func() (sdk.Transport, sdk.Transport)) (*sdk.ClientSession, <-chan error) {
	t.Helper()
	ct, st := pair()
	ran := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { ran <- srv.Run(ctx, st) }()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	cctx, ccancel := context.WithTimeout(context.Background(), bound)
	defer ccancel()
	cs, err := c.Connect(cctx, ct, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, ran
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	return res
}

func textOf(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// eventually waits until cond holds, failing the test after bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func TestToolsListedWithSchemasAndHints(t *testing.T) {
	f := &factory{}
	srv := NewServer(f.make, &Options{ClosedWorld: true})
	defer srv.Close()
	cs, _ := connect(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*sdk.Tool{}
	var names []string
	for _, tool := range res.Tools {
		got[tool.Name] = tool
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "count,echo,plot,die,wait" {
		t.Fatalf("tools %v, want the toolkit's, in its order", names)
	}
	if s := fmt.Sprint(got["echo"].InputSchema); !strings.Contains(s, "text") || !strings.Contains(s, "what to echo") {
		t.Errorf("echo's schema lost its property or description: %s", s)
	}
	if a := got["echo"].Annotations; !a.ReadOnlyHint || a.DestructiveHint != nil {
		t.Errorf("echo: readOnly %v destructive %v, want read-only and no destructive hint", a.ReadOnlyHint, a.DestructiveHint)
	}
	if a := got["die"].Annotations; a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint {
		t.Errorf("die: want destructiveHint true, got %+v", a)
	}
	if a := got["count"].Annotations; a.ReadOnlyHint || a.DestructiveHint != nil {
		t.Errorf("count (unmarked): want no hints (MCP's default: may be destructive), got %+v", a)
	}
	for _, tool := range res.Tools {
		if h := tool.Annotations.OpenWorldHint; h == nil || *h {
			t.Errorf("%s: openWorldHint %v with ClosedWorld, want false", tool.Name, h)
		}
	}
	if f.created.Load() != 1 {
		t.Errorf("listing created %d toolkits, want 1", f.created.Load())
	}
	// Without ClosedWorld nothing is claimed about the world.
	for _, tool := range Tools(toolkit.Of(toolkit.New("x", "x", func(context.Context, countIn) (countOut, error) { return countOut{}, nil })), false) {
		if tool.Annotations.OpenWorldHint != nil {
			t.Errorf("openWorldHint set without ClosedWorld")
		}
	}
}

func TestResultsTextImagesAndErrors(t *testing.T) {
	f := &factory{}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	cs, _ := connect(t, srv, nil)

	res := call(t, cs, "plot", nil)
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("plot: isError %v, %d contents, want one image and no empty text", res.IsError, len(res.Content))
	}
	if img, ok := res.Content[0].(*sdk.ImageContent); !ok || img.MIMEType != "image/png" || string(img.Data) != "\x89PNG fake" {
		t.Errorf("plot content %#v, want the PNG", res.Content[0])
	}

	for _, tc := range []struct {
		name, tool string
		args       any
		mention    string
	}{
		{"tool error", "echo", map[string]any{"text": "fail"}, "asked to fail"},
		{"bad argument type", "echo", map[string]any{"text": 3}, "text"},
		{"unknown argument", "echo", map[string]any{"txt": "x"}, "txt"},
		{"unknown tool", "nope", nil, "count"},
	} {
		res := call(t, cs, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(textOf(res), tc.mention) {
			t.Errorf("%s: isError %v, text %q; want an error result mentioning %q", tc.name, res.IsError, textOf(res), tc.mention)
		}
	}
	if got := textOf(call(t, cs, "count", nil)); got != "kit 1 count 1" {
		t.Errorf("count after errors: %q, want the same toolkit (kit 1) still serving", got)
	}
}

func TestEachSessionHasItsOwnToolkitReleasedAtTheEnd(t *testing.T) {
	f := &factory{}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	a, ranA := connect(t, srv, nil)
	b, _ := connect(t, srv, nil)
	call(t, a, "count", nil)
	call(t, a, "count", nil)
	if got := textOf(call(t, b, "count", nil)); !strings.HasSuffix(got, "count 1") {
		t.Errorf("second session's first count: %q, want its own counter at 1", got)
	}
	if got := textOf(call(t, a, "count", nil)); !strings.HasSuffix(got, "count 3") {
		t.Errorf("first session's third count: %q", got)
	}
	if n := srv.Sessions(); n != 2 {
		t.Errorf("Sessions() = %d, want 2", n)
	}
	a.Close()
	select {
	case err := <-ranA:
		if err != nil {
			t.Errorf("Run after the client disconnected: %v, want nil", err)
		}
	case <-time.After(bound):
		t.Fatal("Run did not return after the client disconnected")
	}
	// Run returns only once the session's toolkit is released.
	if f.released.Load() != 1 || srv.Sessions() != 1 {
		t.Errorf("after one client left: %d released, %d sessions; want 1 and 1", f.released.Load(), srv.Sessions())
	}
	srv.Close()
	if f.released.Load() != 2 || srv.Sessions() != 0 {
		t.Errorf("after Close: %d released, %d sessions; want 2 and 0", f.released.Load(), srv.Sessions())
	}
}

func TestLostSandboxIsReplacedOnTheNextCall(t *testing.T) {
	f := &factory{}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	cs, _ := connect(t, srv, nil)
	call(t, cs, "count", nil)
	res := call(t, cs, "die", nil)
	if !res.IsError || !strings.Contains(textOf(res), "sandbox was lost") {
		t.Errorf("die: isError %v, %q; want an error result saying the sandbox was lost", res.IsError, textOf(res))
	}
	if f.released.Load() != 1 {
		t.Errorf("the lost toolkit was released %d times, want 1", f.released.Load())
	}
	if got := textOf(call(t, cs, "count", nil)); got != "kit 2 count 1" {
		t.Errorf("after the loss: %q, want a fresh toolkit (kit 2)", got)
	}
}

func TestFactoryFailure(t *testing.T) {
	f := &factory{fail: errors.New("no user namespaces here")}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	cs, _ := connect(t, srv, nil)
	res := call(t, cs, "count", nil)
	if !res.IsError || !strings.Contains(textOf(res), "no user namespaces here") {
		t.Errorf("call with a failing factory: isError %v, %q; want the reason as an error result", res.IsError, textOf(res))
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err == nil || !strings.Contains(err.Error(), "no user namespaces here") {
		t.Errorf("tools/list with a failing factory: %v, want a protocol error with the reason", err)
	}
}

func TestProgressWhenTheClientAsks(t *testing.T) {
	f := &factory{progressWait: make(chan struct{})}
	srv := NewServer(f.make, &Options{ProgressInterval: 5 * time.Millisecond})
	defer srv.Close()
	var mu sync.Mutex
	var notes []*sdk.ProgressNotificationParams
	var once sync.Once
	cs, _ := connect(t, srv, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, req.Params)
		if len(notes) == 3 {
			once.Do(func() { close(f.progressWait) }) // the tool ends after three
		}
	}})
	params := &sdk.CallToolParams{Name: "wait"}
	params.SetProgressToken("tok-1")
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("wait: %v %v", err, res)
	}
	mu.Lock()
	got := append([]*sdk.ProgressNotificationParams(nil), notes...)
	mu.Unlock()
	if len(got) < 3 {
		t.Fatalf("%d notifications", len(got))
	}
	for i, n := range got {
		if n.ProgressToken != "tok-1" || n.Progress != float64(i+1) || !strings.Contains(n.Message, "wait still running") {
			t.Errorf("notification %d: %+v", i, n)
		}
	}
	// Without a token, no notification is sent.
	before := len(got)
	call(t, cs, "count", nil)
	mu.Lock()
	after := len(notes)
	mu.Unlock()
	if after != before {
		t.Errorf("%d notifications for a call without a progress token", after-before)
	}
}

func TestCancelledCallKeepsTheToolkit(t *testing.T) {
	f := &factory{progressWait: make(chan struct{})}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	cs, _ := connect(t, srv, nil)
	call(t, cs, "count", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "wait"})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the call reach the tool; either order must work
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("cancelled call returned no error")
		}
	case <-time.After(bound):
		t.Fatal("cancelled call did not return")
	}
	if got := textOf(call(t, cs, "count", nil)); got != "kit 1 count 2" {
		t.Errorf("after a cancelled call: %q, want the same toolkit (kit 1 count 2)", got)
	}
	if f.released.Load() != 0 {
		t.Errorf("a cancelled call released the toolkit")
	}
}

func TestRunReleasesWhenItsContextEnds(t *testing.T) {
	f := &factory{progressWait: make(chan struct{})}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	ct, st := NewInProcessTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call(t, cs, "count", nil)
	// A call in flight must not keep Run from returning: releasing the
	// toolkit is what ends it.
	go cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "wait"})
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-ran:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want context.Canceled", err)
		}
	case <-time.After(bound):
		close(f.progressWait)
		t.Fatal("Run did not return when its context ended with a call in flight")
	}
	if f.released.Load() != 1 {
		t.Errorf("released %d toolkits, want 1", f.released.Load())
	}
}

func TestHTTPSessionsAndIdleTimeout(t *testing.T) {
	f := &factory{}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	hs := httptest.NewServer(srv.HTTPHandler(&HTTPOptions{IdleTimeout: 200 * time.Millisecond}))
	defer hs.Close()
	dial := func() *sdk.ClientSession {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
			&sdk.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	a, b := dial(), dial()
	defer b.Close()
	gotA, gotB := textOf(call(t, a, "count", nil)), textOf(call(t, b, "count", nil))
	if gotA == gotB || !strings.HasSuffix(gotA, "count 1") || !strings.HasSuffix(gotB, "count 1") {
		t.Errorf("two HTTP clients: %q and %q, want two toolkits each at count 1", gotA, gotB)
	}
	a.Close() // DELETE ends the session
	eventually(t, "the closed session's toolkit is released", func() bool { return f.released.Load() >= 1 })
	// b says nothing: the idle timeout ends its session too.
	eventually(t, "the idle session's toolkit is released", func() bool { return f.released.Load() == 2 })
	if srv.Sessions() != 0 {
		t.Errorf("Sessions() = %d after both ended", srv.Sessions())
	}
}

func TestHTTPRefusesBrowsersOfOtherOrigins(t *testing.T) {
	// A page on another site that the user visits must not reach the
	// sandbox through the user's own server, neither by DNS rebinding (a
	// foreign Host) nor by a cross-origin request.
	f := &factory{}
	srv := NewServer(f.make, nil)
	defer srv.Close()
	hs := httptest.NewServer(srv.HTTPHandler(nil))
	defer hs.Close()
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	for _, tc := range []struct {
		name    string
		headers map[string]string
		host    string
		want    int
	}{
		{"a client that is not a browser", nil, "", 200},
		{"a page of the same origin", map[string]string{"Origin": hs.URL, "Sec-Fetch-Site": "same-origin"}, "", 200},
		{"a page of another site", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, "", 403},
		{"another origin without fetch metadata", map[string]string{"Origin": "http://evil.example"}, "", 403},
		{"DNS rebinding", nil, "evil.example", 403},
	} {
		req := httptest.NewRequest("POST", hs.URL, strings.NewReader(initialize))
		req.RequestURI = ""
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
	if f.created.Load() != 0 {
		t.Errorf("initialize alone created %d toolkits", f.created.Load())
	}
}
