package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// PoolConfig sets how a Pool keeps its sandboxes ready. Zero fields take
// the defaults named on each field.
type PoolConfig struct {
	// Size is the number of ready sandboxes the pool keeps (default 2).
	Size int
	// MaxStarting bounds how many sandboxes start at once (default 2:
	// starts are CPU-bound on the host, and a burst of 8 on 2 cores takes
	// as long as starting them in pairs).
	MaxStarting int
	// IdleTimeout closes and replaces a ready sandbox nobody took for this
	// long (default 10 minutes, and never more than half the sandbox's
	// TTL), so that a quiet pool does not keep stale sandboxes forever.
	IdleTimeout time.Duration
	// StartWhenEmpty makes Get start a sandbox in the caller's goroutine
	// when none is ready, instead of waiting for the next background start.
	StartWhenEmpty bool
	// PythonImports, when set, gives each pooled sandbox these modules (for
	// example "numpy", "pandas") as WithPythonImports does: a template
	// interpreter imports them once and every Python context is forked from
	// it. The template and the default context are started before the
	// sandbox counts as ready, so the caller's first Python run pays for
	// neither, and a new context costs a fork. A failed import fails that
	// start.
	PythonImports []string
}

// Pool keeps sandboxes of one configuration started ahead of time, so that
// Get hands one over for the cost of a channel receive and a liveness check
// (tens of µs locally) instead of a creation. A sandbox is never reused: each Get returns a sandbox nobody had
// before, the caller owns it (and closes it), and the pool starts a
// replacement in the background. A pooled sandbox is created by New with the
// pool's options, so it has exactly the controls a fresh one would; its TTL
// starts when Get hands it over.
//
// A Pool is safe for concurrent use.
type Pool struct {
	cfg  PoolConfig
	opts []Option
	ttl  time.Duration

	ready    chan pooled
	startSem chan struct{}
	wake     chan struct{} // nudges the filler after a Get or a failure
	done     chan struct{}
	wg       sync.WaitGroup
	refill   *time.Timer // nudges the filler once holdUntil has passed

	mu        sync.Mutex
	closed    bool
	pending   int       // starts in flight
	waiting   int       // Gets waiting for a sandbox
	holdUntil time.Time // no start before this unless a Get waits (refillDelay)
	lastErr   error     // the last failed start, for waiting callers
	failures  int       // consecutive failed starts (backoff)
}

// refillDelay is how long after a Get the pool waits before it starts the
// replacement, when no other Get is waiting: long enough for the caller's
// first command to run without the start competing with it for the CPU. A
// local start takes ~12 ms of CPU (2 ms in this process, ~10 ms in the new
// agent's processes, measured with getrusage over 50 starts) on a machine
// that may have 2 cores, and started at Get it made the caller's first
// `true` take 2.6–3.3 ms instead of the 1.7–1.8 ms of a sandbox already
// held (idle machine). With the hold, BenchmarkPoolGetAndFirstCommand
// under load 25, old and new builds alternated: 4.7–6.6 ms -> 1.6–2.0 ms,
// 3.3–4.2x -> 1.03–1.49x the held sandbox's command; docker 18–53 ms ->
// 6–10 ms (load 28). A Get that has to wait ends the hold: waiting callers
// need the start at once.
//
// The start is not also run at a lower CPU priority (nice, SCHED_IDLE),
// which would keep it out of the way of later commands too: the new
// agent's processes inherit the priority of the thread that launches
// them, and putting them back needs CAP_SYS_NICE (an unprivileged host
// could not, and its sandboxes would keep the low priority for good);
// and on a loaded machine a start at low priority barely runs, so a Get
// that comes to wait for it would wait for the load.
const refillDelay = 20 * time.Millisecond

type pooled struct {
	sb    *Sandbox
	ready time.Time
}

// NewPool starts a pool of sandboxes created with opts (the options of
// New). It returns once the pool's starts are under way; the first Get may
// wait for the first start. A pool may not share a host workspace
// (WithWorkspace): every pooled sandbox gets its own temporary workspace,
// so nothing of one caller's files reaches the next.
func NewPool(ctx context.Context, cfg PoolConfig, opts ...Option) (*Pool, error) {
	const op = "NewPool"
	c := config{env: map[string]string{}, ttl: DefaultTTL, options: map[string]string{}}
	for _, o := range opts {
		o(&c)
	}
	if c.workspace != "" {
		return nil, newError(CodeInvalidArgument, op, "a pool cannot use a shared workspace (%s): each pooled sandbox gets its own; drop WithWorkspace, or create such sandboxes with New", c.workspace)
	}
	if cfg.Size < 0 || cfg.MaxStarting < 0 || cfg.IdleTimeout < 0 {
		return nil, newError(CodeInvalidArgument, op, "PoolConfig fields must not be negative (Size %d, MaxStarting %d, IdleTimeout %s)", cfg.Size, cfg.MaxStarting, cfg.IdleTimeout)
	}
	for _, m := range cfg.PythonImports {
		if !validModule(m) {
			return nil, newError(CodeInvalidArgument, op, "PythonImports: %q is not a Python module name", truncateForMessage(m))
		}
	}
	if cfg.Size == 0 {
		cfg.Size = 2
	}
	if cfg.MaxStarting == 0 {
		cfg.MaxStarting = 2
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if c.ttl > 0 && cfg.IdleTimeout > c.ttl/2 {
		// The sandbox's own TTL runs from its creation until Get restarts
		// it; replacing at half the TTL means a ready sandbox never expires
		// in the pool.
		cfg.IdleTimeout = c.ttl / 2
	}
	opts = append([]Option(nil), opts...)
	if len(cfg.PythonImports) > 0 {
		opts = append(opts, WithPythonImports(cfg.PythonImports...))
	}
	p := &Pool{
		cfg:      cfg,
		opts:     opts,
		ttl:      c.ttl,
		ready:    make(chan pooled, cfg.Size),
		startSem: make(chan struct{}, cfg.MaxStarting),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	if err := ctx.Err(); err != nil {
		return nil, wrapErr(op, err)
	}
	p.refill = time.AfterFunc(time.Hour, p.nudge)
	p.refill.Stop()
	p.wg.Add(1)
	go p.fill()
	return p, nil
}

// validModule accepts dotted Python identifiers (ASCII), the only thing
// PythonImports puts into an import statement.
func validModule(m string) bool {
	if m == "" {
		return false
	}
	for _, part := range strings.Split(m, ".") {
		if part == "" || (part[0] >= '0' && part[0] <= '9') {
			return false
		}
		for _, r := range part {
			if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return false
			}
		}
	}
	return true
}

func truncateForMessage(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// fill keeps Size sandboxes ready or starting, and replaces idle ones.
func (p *Pool) fill() {
	defer p.wg.Done()
	tick := time.NewTicker(p.cfg.IdleTimeout / 4)
	defer tick.Stop()
	for {
		p.topUp()
		select {
		case <-p.done:
			return
		case <-p.wake:
		case <-tick.C:
			p.expireIdle()
		}
	}
}

// topUp starts as many sandboxes as the pool lacks, at most MaxStarting at
// once (the semaphore is taken inside each start). While a Get's hold
// lasts (refillDelay) and no Get waits, it starts nothing: the refill
// timer nudges it again when the hold ends.
func (p *Pool) topUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.waiting == 0 && time.Now().Before(p.holdUntil) {
		return
	}
	for len(p.ready)+p.pending < p.cfg.Size {
		p.pending++
		p.wg.Add(1)
		go p.startOne()
	}
}

// startOne creates one sandbox and puts it into the pool.
func (p *Pool) startOne() {
	defer p.wg.Done()
	select {
	case p.startSem <- struct{}{}:
	case <-p.done:
		p.mu.Lock()
		p.pending--
		p.mu.Unlock()
		return
	}
	sb, err := p.create(context.Background())
	<-p.startSem
	p.mu.Lock()
	p.pending--
	if err != nil {
		p.lastErr = err
		p.failures++
		backoff := time.Duration(min(p.failures, 6)) * 500 * time.Millisecond
		p.mu.Unlock()
		// A failing start (engine down, image missing) is retried with a
		// growing pause instead of a hot loop; waiting Gets see lastErr.
		select {
		case <-time.After(backoff):
		case <-p.done:
		}
		p.nudge()
		return
	}
	p.failures, p.lastErr = 0, nil
	if p.closed {
		p.mu.Unlock()
		sb.Close()
		return
	}
	// The channel has room, but for one race: topUp counts what is ready
	// while expireIdle holds one out to look at it, and may start one too
	// many. The surplus is closed, not sent: a send on a full channel
	// would block with p.mu held, and every Get and start with it.
	select {
	case p.ready <- pooled{sb: sb, ready: time.Now()}:
		p.mu.Unlock()
	default:
		p.mu.Unlock()
		sb.Close()
	}
}

// create makes one sandbox with the pool's options and preloads Python.
func (p *Pool) create(ctx context.Context) (*Sandbox, error) {
	sb, err := New(ctx, p.opts...)
	if err != nil {
		return nil, err
	}
	// The first command in a new sandbox costs ~3 ms more than later ones
	// (the agent's first fork warms its spawner and page cache); paying it
	// here makes the caller's first command a warm one.
	if _, err := sb.Commands.Run(ctx, Command{Args: []string{"true"}}); err != nil {
		sb.Close()
		return nil, err
	}
	if len(p.cfg.PythonImports) > 0 {
		// The default context, forked from the template (which New started
		// in the background; this waits for it).
		if err := sb.Python.Create(ctx, "default"); err != nil {
			sb.Close()
			return nil, err
		}
	}
	return sb, nil
}

func (p *Pool) nudge() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// expireIdle closes ready sandboxes older than IdleTimeout; topUp replaces
// them.
func (p *Pool) expireIdle() {
	n := len(p.ready)
	for i := 0; i < n; i++ {
		select {
		case ps := <-p.ready:
			if time.Since(ps.ready) > p.cfg.IdleTimeout || !ps.sb.alive() {
				ps.sb.Close()
				continue
			}
			p.putBack(ps)
		default:
			return
		}
	}
}

// putBack returns a sandbox expireIdle took out to look at. A start may
// have filled its place meanwhile (see startOne): then it is closed, since
// a send on the full channel would block with p.mu held.
func (p *Pool) putBack(ps pooled) {
	p.mu.Lock()
	if !p.closed {
		select {
		case p.ready <- ps:
			p.mu.Unlock()
			return
		default:
		}
	}
	p.mu.Unlock()
	ps.sb.Close()
}

// Get hands over a ready sandbox, which the caller owns from now on (close
// it when done; its TTL starts now). A replacement starts in the
// background shortly after (refillDelay), so that it does not compete with
// the caller's first command, or at once when other Gets are waiting. With
// no sandbox ready, Get waits for the next start (or starts one itself
// with StartWhenEmpty) until ctx is done; when starts keep failing it
// returns the last start's error. A sandbox whose agent has exited is
// never handed over.
func (p *Pool) Get(ctx context.Context) (*Sandbox, error) {
	const op = "Pool.Get"
	for {
		var ps pooled
		select {
		case ps = <-p.ready:
		default:
			if p.cfg.StartWhenEmpty {
				if !p.hold() {
					return nil, newError(CodeClosed, op, "the pool is closed; create a new one")
				}
				sb, err := p.create(ctx)
				if err != nil {
					return nil, wrapErr(op, err)
				}
				sb.restartTTL()
				return sb, nil
			}
			var err error
			if ps, err = p.wait(ctx); err != nil {
				return nil, wrapErr(op, err)
			}
		}
		if !p.hold() {
			ps.sb.Close()
			return nil, newError(CodeClosed, op, "the pool is closed; create a new one")
		}
		if !ps.sb.alive() || ps.sb.exited(ctx) {
			// Died or expired while it waited (its agent was killed, say):
			// never hand out a dead sandbox; take the next. Its Close
			// runs in the background: the caller need not wait for it.
			p.discard(ps.sb)
			if ctx.Err() != nil {
				return nil, wrapErr(op, ctx.Err())
			}
			continue
		}
		ps.sb.restartTTL()
		return ps.sb, nil
	}
}

// hold asks for the replacement of the sandbox a Get is taking: at once
// when other Gets are waiting, after refillDelay otherwise. It reports
// false when the pool is closed.
func (p *Pool) hold() bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	// A hold already pending is not pushed back: Gets closer together
	// than refillDelay would otherwise postpone every replacement until
	// the pool ran empty (found in review).
	if now := time.Now(); !now.Before(p.holdUntil) {
		p.holdUntil = now.Add(refillDelay)
		p.refill.Reset(refillDelay)
	}
	urgent := p.waiting > 0
	p.mu.Unlock()
	if urgent {
		p.nudge()
	}
	return true
}

// discard closes a sandbox Get will not hand out, in the background while
// the pool is open (Close waits for it), or at once when it has closed.
func (p *Pool) discard(sb *Sandbox) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		sb.Close()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		sb.Close()
	}()
}

// wait is Get on an empty pool: it counts itself as waiting, which ends
// any hold on starts, and takes the next sandbox that becomes ready.
func (p *Pool) wait(ctx context.Context) (pooled, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return pooled{}, newError(CodeClosed, "Pool.Get", "the pool is closed; create a new one")
	}
	p.waiting++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
	}()
	p.nudge()
	if err := p.waitErr(); err != nil {
		return pooled{}, err
	}
	select {
	case ps := <-p.ready:
		return ps, nil
	case <-ctx.Done():
		if err := p.waitErr(); err != nil {
			return pooled{}, err
		}
		return pooled{}, ctx.Err()
	case <-p.done:
		return pooled{}, newError(CodeClosed, "Pool.Get", "the pool is closed; create a new one")
	}
}

// exited reports whether the sandbox's agent has exited, asking the
// backend's kernel-side probe where it has one (driver.Prober: one
// non-blocking syscall) and the agent itself otherwise (a ping, one round
// trip: tens of µs locally, a few ms through a container engine).
func (sb *Sandbox) exited(ctx context.Context) bool {
	if pr, ok := sb.inst.(driver.Prober); ok {
		return pr.Exited()
	}
	return sb.client.Do(ctx, wire.OpPing.Name, struct{}{}, nil) != nil
}

// waitErr is the error a waiting Get reports instead of waiting forever:
// the last start's, once starts have failed twice in a row.
func (p *Pool) waitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures >= 2 && p.lastErr != nil {
		return fmt.Errorf("the pool cannot start sandboxes: %w", p.lastErr)
	}
	return nil
}

// Close stops the pool's starts and closes every sandbox it still holds.
// Sandboxes already handed out by Get belong to their callers and are not
// touched. Close waits for starts in flight and returns the first error of
// the closes.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.refill.Stop()
	p.mu.Unlock()
	p.wg.Wait()
	var errs []error
	for {
		select {
		case ps := <-p.ready:
			if err := ps.sb.Close(); err != nil {
				errs = append(errs, err)
			}
		default:
			return errors.Join(errs...)
		}
	}
}

// alive reports whether the sandbox is open and its agent answers.
func (sb *Sandbox) alive() bool {
	sb.mu.Lock()
	closed := sb.closed
	sb.mu.Unlock()
	return !closed && sb.client.Err() == nil
}

// restartTTL starts the sandbox's TTL afresh (a pooled sandbox's TTL runs
// from Get, not from its creation).
func (sb *Sandbox) restartTTL() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.closed {
		return
	}
	sb.created = time.Now()
	sb.ttl.Reset(sb.cfg.ttl)
	sb.expires = time.Now().Add(sb.cfg.ttl)
}
