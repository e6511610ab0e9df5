package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// Factory creates the toolkit of one client session. release frees what
// the toolkit holds (closes its sandbox); it is called once, when the
// session ends. ctx is the context of the request that needed the toolkit
// first; it bounds creation, not the toolkit's life.
type Factory func(ctx context.Context) (kit *toolkit.Toolkit, release func(), err error)

// Options configure a Server. The zero value is usable.
type Options struct {
	// Name and Version identify the server to clients (default
	// "sandboxkit" and "dev").
	Name    string
	Version string
	// Instructions tell the client's model how to use the server.
	Instructions string
	// Logger receives the server's own log lines (sessions, sandbox
	// creation, failures). Nil discards them. A stdio server must never
	// log to standard output: that is the protocol stream.
	Logger *slog.Logger
	// ProgressInterval is how often a progress notification is sent while
	// a call that carries a progress token runs (default 1 s).
	ProgressInterval time.Duration
	// ClosedWorld declares that the tools cannot reach anything outside
	// the sandbox (it has no network), so every tool is annotated with
	// openWorldHint false.
	ClosedWorld bool
}

// DefaultProgressInterval is the interval of progress notifications when
// Options.ProgressInterval is zero.
const DefaultProgressInterval = time.Second

// Server serves toolkits over MCP, one toolkit per client session. Create
// it with NewServer; it is safe for concurrent use.
type Server struct {
	factory Factory
	opts    Options
	log     *slog.Logger
	srv     *sdk.Server

	mu       sync.Mutex
	sessions map[*sdk.ServerSession]*session
	closed   bool
	wg       sync.WaitGroup // one per session waiter
}

// session is the per-client state: its toolkit, created on first use.
type session struct {
	ss *sdk.ServerSession
	// ctx is cancelled when the session ends; every call's context
	// derives from it, so that no call outlives its session even when
	// its tool does not touch the sandbox (the SDK's Close waits for
	// calls in flight).
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex // held while creating, so concurrent first calls share one toolkit
	kit     *toolkit.Toolkit
	release func()
	ended   bool
}

// NewServer returns a server that calls newToolkit once per client session.
// It panics when newToolkit is nil, a programming error.
func NewServer(newToolkit Factory, opts *Options) *Server {
	if newToolkit == nil {
		panic("mcp.NewServer: nil factory")
	}
	s := &Server{factory: newToolkit, sessions: map[*sdk.ServerSession]*session{}}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Name == "" {
		s.opts.Name = "sandboxkit"
	}
	if s.opts.Version == "" {
		s.opts.Version = "dev"
	}
	if s.opts.ProgressInterval <= 0 {
		s.opts.ProgressInterval = DefaultProgressInterval
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: s.opts.Name, Version: s.opts.Version}, &sdk.ServerOptions{
		Instructions: s.opts.Instructions,
		Logger:       s.opts.Logger,
		// Tools only: no logging capability (logs go to the operator, not
		// the client), and no listChanged (a session's tools never change).
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}},
	})
	// Tools are served by middleware rather than Server.AddTool because
	// the SDK's tool registry is one per server, while ours is one per
	// session: the middleware answers tools/list and tools/call from the
	// session's own toolkit and passes every other method on.
	s.srv.AddReceivingMiddleware(s.middleware)
	return s
}

// SDKServer returns the underlying go-sdk server, e.g. to add prompts or
// resources. Tools added to it directly are hidden by this server's own
// tools/list.
func (s *Server) SDKServer() *sdk.Server { return s.srv }

// Run serves one client over t (e.g. [StdioTransport]) until the
// client disconnects or ctx is done, then releases the session's toolkit
// before it returns. A clean disconnect returns nil.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcp: connecting: %w", err)
	}
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case err = <-ended:
	case <-ctx.Done():
		// Release first: the SDK's Close waits for calls in flight, and
		// closing the sandbox is what ends them promptly.
		s.endSession(ss)
		ss.Close()
		<-ended
		err = ctx.Err()
	}
	s.endSession(ss)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// HTTPOptions configure the streamable HTTP handler.
type HTTPOptions struct {
	// IdleTimeout ends a session (and releases its toolkit) after this
	// long without a request from its client, for clients that vanish
	// without saying goodbye. Zero keeps idle sessions forever.
	IdleTimeout time.Duration
}

// HTTPHandler returns an http.Handler serving MCP's streamable HTTP
// transport, with one session, and so one toolkit, per client. Requests
// from a localhost listener with a non-localhost Host header are refused
// (DNS rebinding protection), and so are cross-origin requests from
// browsers (http.CrossOriginProtection): a web page the user visits must
// not run code in a sandbox through a server on the user's machine.
// Clients that are not browsers send no Origin and are not affected.
func (s *Server) HTTPHandler(opts *HTTPOptions) http.Handler {
	var o HTTPOptions
	if opts != nil {
		o = *opts
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:         s.opts.Logger,
		SessionTimeout: o.IdleTimeout,
	})
	return http.NewCrossOriginProtection().Handler(h)
}

// Sessions returns how many client sessions currently hold a toolkit.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.sessions {
		st.mu.Lock()
		if st.kit != nil {
			n++
		}
		st.mu.Unlock()
	}
	return n
}

// Close ends every session, with or without a toolkit, releases every
// toolkit, and waits until that is done. Sessions that connect afterwards
// get no toolkit: their calls fail with a protocol error. Close is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var open []*session
	for _, st := range s.sessions {
		open = append(open, st)
	}
	s.mu.Unlock()
	for _, st := range open {
		// Release first: the SDK's Close waits for calls in flight, and
		// closing the sandbox is what ends them promptly.
		s.endSession(st.ss)
		st.ss.Close()
	}
	// Sessions that never asked for a tool hold no toolkit, but their
	// connections (an HTTP client that initialized and left) would live
	// on: end them too.
	var idle []*sdk.ServerSession
	for ss := range s.srv.Sessions() {
		idle = append(idle, ss)
	}
	for _, ss := range idle {
		ss.Close()
	}
	s.wg.Wait()
	return nil
}

// sessionFor returns the state of ss, registering it (and a goroutine that
// releases it when the session ends) on first sight.
func (s *Server) sessionFor(ss *sdk.ServerSession) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok {
		return st, nil
	}
	if s.closed {
		return nil, errors.New("the server is shutting down")
	}
	st := &session{ss: ss}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	s.sessions[ss] = st
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = ss.Wait()
		s.endSession(ss)
		// Forgotten only now that the connection is gone: until then a
		// late request of an ended session must find it ended, not
		// register it anew and create a sandbox nobody would release.
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
	return st, nil
}

// endSession releases the toolkit of ss for good. It is idempotent and
// returns once the release is complete, whoever started it.
func (s *Server) endSession(ss *sdk.ServerSession) {
	s.mu.Lock()
	st, ok := s.sessions[ss]
	s.mu.Unlock()
	if !ok {
		return
	}
	st.cancel() // before taking st.mu: a call creating the toolkit holds it
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended {
		return
	}
	st.ended = true
	if st.release != nil {
		start := time.Now()
		st.release()
		s.log.Info("session ended, sandbox released", "session", ss.ID(), "took", time.Since(start).Round(time.Millisecond))
	}
	st.kit, st.release = nil, nil
}

// toolkit returns the session's toolkit, creating it on first use.
func (s *Server) toolkit(ctx context.Context, st *session) (*toolkit.Toolkit, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended {
		return nil, errors.New("the session has ended")
	}
	if st.kit != nil {
		return st.kit, nil
	}
	start := time.Now()
	kit, release, err := s.factory(ctx)
	if err != nil {
		s.log.Error("cannot create the session's sandbox", "session", st.ss.ID(), "error", err)
		return nil, fmt.Errorf("cannot create the sandbox for this session: %w", err)
	}
	if kit == nil {
		if release != nil {
			release()
		}
		return nil, errors.New("the toolkit factory returned no toolkit")
	}
	if release == nil {
		release = func() {}
	}
	st.kit, st.release = kit, release
	s.log.Info("session sandbox created", "session", st.ss.ID(), "tools", len(kit.Tools()), "took", time.Since(start).Round(time.Millisecond))
	return kit, nil
}

// discard drops a toolkit whose sandbox was lost, so that the session's
// next call gets a fresh one. Only kit itself is dropped: a concurrent call
// may already have replaced it.
func (s *Server) discard(st *session, kit *toolkit.Toolkit) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.kit != kit {
		return
	}
	st.release()
	st.kit, st.release = nil, nil
}

// middleware answers tools/list and tools/call from the session's toolkit.
func (s *Server) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		switch r := req.(type) {
		case *sdk.ListToolsRequest:
			st, err := s.sessionFor(r.Session)
			if err != nil {
				return nil, rpcError(err)
			}
			kit, err := s.toolkit(ctx, st)
			if err != nil {
				return nil, rpcError(err)
			}
			return &sdk.ListToolsResult{Tools: Tools(kit, s.opts.ClosedWorld)}, nil
		case *sdk.CallToolRequest:
			res, err := s.callTool(ctx, r)
			if err != nil {
				return nil, rpcError(err)
			}
			return res, nil
		}
		return next(ctx, method, req)
	}
}

func (s *Server) callTool(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	st, err := s.sessionFor(req.Session)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(st.ctx, cancel)()
	kit, err := s.toolkit(ctx, st)
	if err != nil {
		// The model can do nothing about it, but the user reading the
		// transcript can: say what failed instead of a bare RPC error.
		return errorResult(err.Error()), nil
	}
	name := req.Params.Name
	stop := s.startProgress(ctx, req, name)
	res, err := kit.Call(ctx, name, req.Params.Arguments)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		s.log.Warn("sandbox lost during a call; the next call gets a new one", "session", req.Session.ID(), "tool", name, "error", err)
		s.discard(st, kit)
		return errorResult(fmt.Sprintf("%s could not run: %v. The sandbox was lost with its files and processes; the next call starts a new, empty one.", name, err)), nil
	}
	return Result(res), nil
}

// startProgress sends progress notifications every ProgressInterval until
// the returned stop is called, when the client asked for progress. stop
// returns after the last notification, so none follows the result.
func (s *Server) startProgress(ctx context.Context, req *sdk.CallToolRequest, name string) (stop func()) {
	token := req.Params.GetProgressToken()
	if token == nil {
		return func() {}
	}
	quit := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		tick := time.NewTicker(s.opts.ProgressInterval)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			elapsed := time.Since(start).Round(time.Second)
			err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(n),
				Message:       fmt.Sprintf("%s still running (%s)", name, elapsed),
			})
			if err != nil {
				return // the client is gone; the call itself will notice
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// Tools returns the MCP definitions of kit's tools, in order. closedWorld
// marks them as unable to reach outside the sandbox (see
// Options.ClosedWorld).
func Tools(kit *toolkit.Toolkit, closedWorld bool) []*sdk.Tool {
	tools := kit.Tools()
	out := make([]*sdk.Tool, len(tools))
	for i, t := range tools {
		a := t.Annotations()
		ann := &sdk.ToolAnnotations{Title: a.Title, ReadOnlyHint: a.ReadOnly}
		if a.Destructive {
			ann.DestructiveHint = ptr(true)
		}
		if closedWorld {
			ann.OpenWorldHint = ptr(false)
		}
		out[i] = &sdk.Tool{
			Name:        t.Name(),
			Title:       a.Title,
			Description: t.Description(),
			InputSchema: t.Schema(),
			Annotations: ann,
		}
	}
	return out
}

// Result converts a toolkit result to an MCP tool result: the text first,
// then one image content per image. Result.Data is not sent as structured
// content: without an output schema it adds nothing for the model, and
// clients that prefer it would show JSON instead of the text written for
// the model.
func Result(res toolkit.Result) *sdk.CallToolResult {
	content := make([]sdk.Content, 0, 1+len(res.Images))
	if res.Text != "" || len(res.Images) == 0 {
		content = append(content, &sdk.TextContent{Text: res.Text})
	}
	for _, img := range res.Images {
		content = append(content, &sdk.ImageContent{Data: img.Data, MIMEType: img.MIMEType})
	}
	return &sdk.CallToolResult{Content: content, IsError: res.IsError}
}

// rpcError gives err a JSON-RPC code: the SDK sends a Go error without one
// as code 0, which JSON-RPC does not define and clients show as garbage.
// The server's own failures (no toolkit, shutting down, a cancelled call)
// are internal errors, -32603.
func rpcError(err error) error {
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code != 0 {
		return err
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

func errorResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, IsError: true}
}

func ptr[T any](v T) *T { return &v }
