package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sandboxkit/sandboxkit/adapters/mcp"
	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// sessionTTL is the sandbox TTL when --ttl is not set: longer than any
// session, so that only the session's end closes the sandbox.
const sessionTTL = 100 * 365 * 24 * time.Hour

func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mcp", "[--http ADDR] [--backend local|docker://IMAGE] [--workspace DIR] [--allow-network]\n                 [--allow-domain NAME]... [--allow-weaker TIERS] [--ttl D] [--idle-timeout D] [--pool N] [--allow-remote]\n                 [--policy FILE] [--deny-command PATTERN]...",
		"Serve the sandbox tools over MCP: on stdin/stdout by default, or as streamable HTTP\nwith --http. Every client session gets its own sandbox, closed when the session\nends. Logs go to stderr only.\n\n"+sandboxFlagsHelp+"\n\n"+policyFlagsHelp, stdout)
	var sf sandboxFlags
	sf.register(fs)
	var pf policyFlags
	pf.register(fs)
	addr := fs.String("http", "", "serve streamable HTTP on `addr` (e.g. 127.0.0.1:8080, or 127.0.0.1:0 for a free port; the URL is printed on stderr) instead of stdio")
	idle := fs.Duration("idle-timeout", 30*time.Minute, "with --http: end a session and close its sandbox after this long without requests")
	ttl := fs.Duration("ttl", 0, "close a session's sandbox this long after it was created, even while in use (the next call gets a new, empty one); default: the sandbox lives as long as its session")
	poolSize := fs.Int("pool", 0, "keep `N` sandboxes started ahead of time, so that a new session's first call does not wait for a sandbox to be created (each session still gets a fresh sandbox of its own; not with --workspace)")
	remote := fs.Bool("allow-remote", false, "with --http: accept a listen address beyond loopback. There is no authentication: whoever reaches the port runs code in a sandbox")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *addr != "" && !*remote {
		if err := loopbackOnly(*addr); err != nil {
			return err
		}
	}
	if *ttl < 0 {
		return usagef("--ttl must not be negative, got %s", *ttl)
	}
	if *poolSize < 0 {
		return usagef("--pool must not be negative, got %d", *poolSize)
	}
	if *poolSize > 0 && sf.workspace != "" {
		return usagef("--pool cannot be used with --workspace: pooled sandboxes each get a workspace of their own")
	}
	policy, err := pf.policy(toolkit.Approver(elicit), toolkit.PolicyAudit(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	opts, closeBackend, err := sf.options()
	if err != nil {
		return err
	}
	defer closeBackend()
	// A session's end (stdin closed, DELETE, --idle-timeout, shutdown)
	// is what closes its sandbox. The library's TTL is a backstop for
	// forgotten sandboxes; at its default (1 h) it would close the sandbox
	// of a client still using it, so here it is set past any session
	// unless the operator bounds it with --ttl.
	ttlDesc := "session"
	if *ttl > 0 {
		opts = append(opts, sandbox.WithTTL(*ttl))
		ttlDesc = ttl.String()
	} else {
		opts = append(opts, sandbox.WithTTL(sessionTTL))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	newSandbox := func(ctx context.Context) (*sandbox.Sandbox, error) { return sandbox.New(ctx, opts...) }
	if *poolSize > 0 {
		pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: *poolSize}, opts...)
		if err != nil {
			return err
		}
		defer pool.Close()
		newSandbox = pool.Get
	}
	factory := func(ctx context.Context) (*toolkit.Toolkit, func(), error) {
		sb, err := newSandbox(ctx)
		if err != nil {
			return nil, nil, err
		}
		// One line per sandbox, so that an operator (and the tests) can
		// tell sessions' sandboxes apart and find their workspaces.
		info := sb.Info()
		log.Info("sandbox created", "sandbox", info.ID, "isolation", info.Isolation.String(),
			"network", info.Network, "workspace", info.HostWorkspace, "python", info.Python, "ttl", ttlDesc)
		return withPolicy(toolkit.ForSandbox(sb), policy), func() {
			if err := sb.Close(); err != nil {
				log.Warn("closing the sandbox", "sandbox", info.ID, "error", err)
			}
			log.Info("sandbox closed", "sandbox", info.ID)
		}, nil
	}
	// With --allow-domain the sandbox reaches the listed names: not closed.
	closed := !sf.network && len(sf.domains) == 0
	if closed && sf.allowWeaker != "" {
		// A weaker tier may share the host's network: tell clients the
		// world is closed only if it really is.
		closed = closedWorld(ctx, opts)
		log.Info("probed the tier sandboxes get", "closed_world", closed)
	}
	srv := mcp.NewServer(factory, &mcp.Options{Logger: log, ClosedWorld: closed,
		Instructions: "Tools that run commands, Python and files in an isolated sandbox that lives as long as this session."})
	defer srv.Close()
	withCallSession(srv)
	if *addr == "" {
		// Our line transport, not the SDK's: one malformed line must not
		// end the session and its sandbox (see mcp.LineTransport).
		err := srv.Run(ctx, mcp.StdioTransport(log))
		if ctx.Err() != nil {
			// SIGTERM or SIGINT: how clients stop a server that did not
			// leave when its stdin closed. The sandbox is closed by now,
			// so this is a clean shutdown, not a failure.
			log.Info("stopped by a signal; every sandbox is closed")
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sandboxkit mcp: serving streamable HTTP on http://%s\n", ln.Addr())
	hs := &http.Server{Handler: srv.HTTPHandler(&mcp.HTTPOptions{IdleTimeout: *idle})}
	go func() { <-ctx.Done(); srv.Close(); hs.Close() }()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// loopbackOnly refuses an --http address that listens beyond this machine.
// MCP's streamable HTTP has no authentication here, so such a listener
// would let anyone who reaches the port run code in a sandbox: that takes
// --allow-remote, asked for by name.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--http %q: %v (want HOST:PORT, e.g. 127.0.0.1:8080)", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usagef("--http %q listens beyond this machine, and the server has no authentication: anyone who reaches it runs code in a sandbox. Listen on 127.0.0.1:PORT, or add --allow-remote to accept that", addr)
}

// closedWorld reports whether sandboxes made with opts cannot reach the
// network, by making one and reading what it enforces. Where that cannot
// be known (the sandbox cannot be created), it claims nothing: false.
// The strict tiers (namespace and stronger) always enforce it, so only a
// server that accepts weaker ones needs to ask.
func closedWorld(ctx context.Context, opts []sandbox.Option) bool {
	sb, err := sandbox.New(ctx, opts...)
	if err != nil {
		return false
	}
	defer sb.Close()
	return networkEnforced(sb.Info()) && sb.Info().Egress == nil
}
