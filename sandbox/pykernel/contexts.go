package pykernel

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// DefaultContext is the name of the context that Run uses when given no
// name; it is created on first use.
const DefaultContext = "default"

// Errors of Contexts; match them with errors.Is.
var (
	// ErrNoContext means no context has that name.
	ErrNoContext = errors.New("pykernel: no such context")
	// ErrContextExists means Create was given a name already in use.
	ErrContextExists = errors.New("pykernel: context already exists")
	// ErrTooManyContexts means the limit of live contexts is reached.
	ErrTooManyContexts = errors.New("pykernel: too many contexts")
	// ErrBadName means a context name is empty, too long or has characters
	// other than letters, digits, '_', '-' and '.'.
	ErrBadName = errors.New("pykernel: bad context name")
)

// Contexts is the set of named Python contexts of one sandbox, each a Kernel
// (one driver process). It is safe for concurrent use; runs in different
// contexts proceed in parallel.
type Contexts struct {
	start Starter
	opts  Options
	limit int

	mu     sync.Mutex
	m      map[string]*entry
	closed bool

	// With Options.Imports: the template every context is forked from,
	// started by the first context (or Preload) and again after it died.
	tplSem chan struct{} // held while the template is looked up or started
	tpl    *template
	noFork bool // the Starter cannot host forked contexts: start afresh
	// tplCancel cancels a template start in flight (under mu).
	tplCancel context.CancelFunc
}

// entry is a context, possibly still starting.
type entry struct {
	ready chan struct{} // closed when k or err is set
	k     *Kernel
	err   error
}

// NewContexts returns an empty set whose contexts are started with start and
// opts. limit bounds the live contexts (each is a process); <= 0 means 8.
func NewContexts(start Starter, opts Options, limit int) *Contexts {
	if limit <= 0 {
		limit = 8
	}
	return &Contexts{start: start, opts: opts.withDefaults(), limit: limit, m: map[string]*entry{}, tplSem: make(chan struct{}, 1)}
}

// launch starts one context's driver: forked from the template when there
// are Options.Imports, afresh otherwise.
func (c *Contexts) launch(ctx context.Context) (*process, Info, error) {
	if len(c.opts.Imports) == 0 {
		return startProcess(ctx, c.start, c.opts)
	}
	t, err := c.template(ctx)
	if errors.Is(err, errNoPID) {
		return startProcess(ctx, c.start, c.opts) // imports them itself
	}
	if err != nil {
		return nil, Info{}, err
	}
	p, info, err := t.fork(ctx)
	if errors.Is(err, errNoPID) {
		c.tplSem <- struct{}{}
		c.noFork = true
		c.tpl = nil
		<-c.tplSem
		t.close()
		return startProcess(ctx, c.start, c.opts)
	}
	return p, info, err
}

// template returns the running template, starting one if there is none (or
// it died). A failed start is not remembered: the next call tries again
// (the module may have been installed meanwhile).
func (c *Contexts) template(ctx context.Context) (*template, error) {
	select {
	case c.tplSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.tplSem }()
	if c.noFork {
		return nil, errNoPID
	}
	if c.tpl != nil && c.tpl.alive() {
		return c.tpl, nil
	}
	if c.tpl != nil {
		c.tpl.close() // dead already; collect it
		c.tpl = nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	closed := c.closed
	c.tplCancel = cancel
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	t, err := startTemplate(ctx, c.start, c.opts)
	c.mu.Lock()
	closed = c.closed
	c.tplCancel = nil
	c.mu.Unlock()
	if err != nil {
		if closed {
			return nil, ErrClosed
		}
		return nil, err
	}
	if closed {
		t.close()
		return nil, ErrClosed
	}
	c.tpl = t
	return t, nil
}

// Preload starts the template interpreter of Options.Imports now, so that
// the first context does not wait for the imports. It returns the start's
// error (ErrImport names a module that failed). Without Imports it does
// nothing.
func (c *Contexts) Preload(ctx context.Context) error {
	if len(c.opts.Imports) == 0 {
		return nil
	}
	_, err := c.template(ctx)
	if errors.Is(err, errNoPID) {
		return nil
	}
	return err
}

func validName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: %q: want 1 to 64 characters", ErrBadName, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("%w: %q: use letters, digits, '_', '-' and '.'", ErrBadName, name)
		}
	}
	return nil
}

// Create starts a new context named name.
func (c *Contexts) Create(ctx context.Context, name string) error {
	_, err := c.open(ctx, name, false)
	return err
}

// open returns the context, starting it if it does not exist and mayExist
// (get-or-create) or failing with ErrContextExists if it does and !mayExist.
func (c *Contexts) open(ctx context.Context, name string, mayExist bool) (*Kernel, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	e, ok := c.m[name]
	if ok && !mayExist {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrContextExists, name)
	}
	if !ok {
		if len(c.m) >= c.limit {
			names := make([]string, 0, len(c.m))
			for n := range c.m {
				names = append(names, n)
			}
			c.mu.Unlock()
			sort.Strings(names)
			// Name them: the caller (often a model) reuses one instead of
			// guessing which exist.
			return nil, fmt.Errorf("%w: all %d are in use (%s); run in one of them, or remove one first", ErrTooManyContexts, c.limit, strings.Join(names, ", "))
		}
		e = &entry{ready: make(chan struct{})}
		c.m[name] = e
		c.mu.Unlock()
		e.k, e.err = startKernel(ctx, c.launch, c.opts)
		c.mu.Lock()
		if e.err != nil && c.m[name] == e {
			delete(c.m, name) // a failed start leaves no context behind
		}
		if e.err == nil && c.closed {
			_ = e.k.Close()
			e.k, e.err = nil, ErrClosed
		}
		close(e.ready)
		c.mu.Unlock()
		return e.k, e.err
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
		return e.k, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// get returns an existing context; name "" means DefaultContext, which is
// created on first use.
func (c *Contexts) get(ctx context.Context, name string) (*Kernel, error) {
	if name == "" || name == DefaultContext {
		return c.open(ctx, DefaultContext, true)
	}
	return c.lookup(ctx, name)
}

// lookup returns an existing context and never creates one.
func (c *Contexts) lookup(ctx context.Context, name string) (*Kernel, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	c.mu.Lock()
	e, ok := c.m[name]
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q (create it first)", ErrNoContext, name)
	}
	select {
	case <-e.ready:
		if e.err != nil {
			return nil, fmt.Errorf("%w: %q", ErrNoContext, name)
		}
		return e.k, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run runs code in the named context ("" is the default context). If the
// context's process had died in an earlier run, it is restarted first and the
// Execution has StateLost set.
func (c *Contexts) Run(ctx context.Context, name, code string, ro RunOptions) (*Execution, error) {
	k, err := c.get(ctx, name)
	if err != nil {
		return nil, err
	}
	ex, err := k.Run(ctx, code, ro)
	if ex == nil && errors.Is(err, ErrDied) {
		if rerr := k.Restart(ctx); rerr != nil {
			return nil, rerr
		}
		ex, err = k.Run(ctx, code, ro)
		if ex != nil {
			ex.StateLost = true
		}
	}
	return ex, err
}

// Kernel returns the named context's Kernel ("" is the default context,
// created on first use).
func (c *Contexts) Kernel(ctx context.Context, name string) (*Kernel, error) {
	return c.get(ctx, name)
}

// ContextInfo describes one context for List.
type ContextInfo struct {
	Name string
	// ExecutionCount is the count of its last run.
	ExecutionCount int
	// Python describes its interpreter process.
	Python Info
}

// List describes the contexts that are running, sorted by name.
func (c *Contexts) List() []ContextInfo {
	c.mu.Lock()
	var out []ContextInfo
	for name, e := range c.m {
		select {
		case <-e.ready:
			if e.err == nil {
				out = append(out, ContextInfo{Name: name, ExecutionCount: e.k.ExecutionCount(), Python: e.k.Info()})
			}
		default: // still starting
		}
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Restart restarts the named context: its state is lost.
func (c *Contexts) Restart(ctx context.Context, name string) error {
	k, err := c.get(ctx, name)
	if err != nil {
		return err
	}
	return k.Restart(ctx)
}

// Remove stops the named context and forgets it.
func (c *Contexts) Remove(ctx context.Context, name string) error {
	if name == "" {
		name = DefaultContext
	}
	k, err := c.lookup(ctx, name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if e := c.m[name]; e != nil && e.k == k {
		delete(c.m, name)
	}
	c.mu.Unlock()
	return k.Close()
}

// Close stops every context (and the template). Later calls fail with
// ErrClosed.
func (c *Contexts) Close() error {
	c.mu.Lock()
	c.closed = true
	entries := c.m
	c.m = map[string]*entry{}
	if c.tplCancel != nil {
		c.tplCancel() // a template start in flight ends now
	}
	c.mu.Unlock()
	for _, e := range entries {
		select {
		case <-e.ready:
			if e.k != nil {
				_ = e.k.Close()
			}
		default: // a starting context closes itself when its start ends
		}
	}
	// A template start in flight was cancelled above; waiting for it is
	// short.
	c.tplSem <- struct{}{}
	if c.tpl != nil {
		c.tpl.close()
		c.tpl = nil
	}
	<-c.tplSem
	return nil
}
