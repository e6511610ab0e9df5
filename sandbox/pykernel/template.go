package pykernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"
)

// A template is a driver started with "template MOD...": it imports
// Options.Imports once and then forks contexts on request, so that a new
// context costs a fork instead of an interpreter start plus the imports.
//
// A forked context must still be a process of the sandbox like any other:
// its streams go through the agent, the agent's Kill and timeouts reach it,
// the sandbox's rlimits apply. So each context starts with a stand-in
// process, the stub (`sleep`), started by the Starter exactly as a driver
// is; the template forks a child that takes the stub's stdin and stdout
// (opening /proc/STUB/fd/0 and 1: no unix socket is needed, which the
// Landlock tier forbids), the stub's kill tag (the agent finds a command's
// processes by it) and a process group of its own. Then:
//   - the context's streams are the stub's pipes, as a driver's are;
//   - Kill kills the stub's command, which the agent extends to the child by
//     the tag; the child also watches the stub (a pidfd) and kills its own
//     group when the stub is gone, for Starters without tags (ExecProc);
//   - Signal (the interrupt) goes through the template to the child's group;
//   - the template reaps the child, reports its exit code and kills the
//     stub, which ends the streams on the Go side as a driver's exit does.
//
// When the template dies, every context forked from it is killed (their
// exits could no longer be reported) and the next start makes a new
// template; Contexts.Run restarts a context whose process died.
type template struct {
	p     *process
	info  Info
	done  chan struct{} // closed when the template's process has ended
	start Starter       // starts the stubs
	opts  Options
	bg    sync.WaitGroup // stub starts in the background

	wmu sync.Mutex // one request line at a time on its stdin

	mu      sync.Mutex
	nextID  int
	waiting map[int]chan message // fork requests by id
	kids    map[int]*forkedProc  // live contexts by pid
	exits   map[int]int          // exit codes reported before the context was registered
	dead    bool
	// spareStub is a stub started ahead, so that a new context does not
	// wait for a process start either; stubStarting: one is on its way.
	spareStub    Proc
	stubStarting bool
}

// templateLineCap bounds a template message (they are tiny).
const templateLineCap = 64 << 10

// stubArgv is the stand-in process of a forked context: it only has to
// exist (the child uses its pipes) until the template kills it. It never
// reads stdin.
var stubArgv = []string{"sleep", "2147483647"}

func startTemplate(ctx context.Context, start Starter, opts Options) (*template, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	argv := append([]string{opts.Python, "-u", "-c", bootstrap, "template"}, opts.Imports...)
	p, info, err := launchDriver(ctx, start, argv, opts, templateLineCap)
	if err != nil {
		return nil, err
	}
	t := &template{p: p, info: info, done: make(chan struct{}), start: start, opts: opts,
		waiting: map[int]chan message{}, kids: map[int]*forkedProc{}, exits: map[int]int{}}
	go t.dispatch()
	t.refillStub()
	return t, nil
}

// dispatch routes the template's messages until it ends, then kills every
// context it forked.
func (t *template) dispatch() {
	for m := range t.p.msgs {
		t.mu.Lock()
		switch m.kind {
		case msgForked:
			if ch := t.waiting[m.id]; ch != nil {
				delete(t.waiting, m.id)
				ch <- m
			}
		case msgExit:
			if k := t.kids[m.pid]; k != nil {
				delete(t.kids, m.pid)
				k.setExit(m.code)
			} else if len(t.exits) < 1024 {
				t.exits[m.pid] = m.code
			}
		}
		t.mu.Unlock()
	}
	t.mu.Lock()
	t.dead = true
	kids := t.kids
	t.kids = map[int]*forkedProc{}
	for id, ch := range t.waiting {
		delete(t.waiting, id)
		close(ch)
	}
	spare := t.spareStub
	t.spareStub = nil
	t.mu.Unlock()
	close(t.done)
	for _, k := range kids {
		_ = k.stub.Kill()
	}
	if spare != nil {
		killStub(spare)
	}
}

func killStub(p Proc) {
	_ = p.Kill()
	_, _ = p.Wait()
}

func (t *template) env() []string {
	if t.opts.Env == nil {
		return []string{} // explicitly empty: a Starter must never read nil as "inherit"
	}
	return t.opts.Env
}

// refillStub starts the next spare stub in the background, unless there is
// one or one is starting.
func (t *template) refillStub() {
	t.mu.Lock()
	if t.dead || t.spareStub != nil || t.stubStarting {
		t.mu.Unlock()
		return
	}
	t.stubStarting = true
	t.bg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), t.opts.StartTimeout)
		defer cancel()
		stub, err := t.start(ctx, stubArgv, t.env(), t.opts.Dir)
		t.mu.Lock()
		t.stubStarting = false
		if err == nil && !t.dead {
			t.spareStub, stub = stub, nil
		}
		t.mu.Unlock()
		if err == nil && stub != nil {
			killStub(stub)
		}
	}()
}

// takeStub returns the spare stub (spare is then true) if useSpare and
// there is one, or starts one.
func (t *template) takeStub(ctx context.Context, useSpare bool) (stub Proc, spare bool, err error) {
	if useSpare {
		t.mu.Lock()
		stub, t.spareStub = t.spareStub, nil
		t.mu.Unlock()
	}
	if stub != nil {
		return stub, true, nil
	}
	stub, err = t.start(ctx, stubArgv, t.env(), t.opts.Dir)
	if err != nil {
		return nil, false, fmt.Errorf("%w: starting the context's process (%s): %v", ErrStart, stubArgv[0], err)
	}
	return stub, false, nil
}

func (t *template) alive() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.dead
}

// close kills the template (and with it every context it forked).
func (t *template) close() {
	t.p.teardown()
	<-t.done
	t.bg.Wait() // a stub that finished starting now sees dead and is killed
}

// send writes one request line; the returned channel yields the write's error.
func (t *template) send(req map[string]any) <-chan error {
	line, _ := json.Marshal(req) // maps of ints and strings always marshal
	line = append(line, '\n')
	errc := make(chan error, 1)
	t.p.writers.Add(1)
	go func() {
		defer t.p.writers.Done()
		t.wmu.Lock()
		defer t.wmu.Unlock()
		_, err := t.p.proc.Stdin().Write(line)
		errc <- err
	}()
	return errc
}

// errNoPID marks a Starter whose processes do not tell their PID: contexts
// cannot be forked for them.
var errNoPID = errors.New("the Starter's processes do not tell their PID")

// fork starts a context forked from the template and waits until its driver
// is ready.
func (t *template) fork(ctx context.Context) (*process, Info, error) {
	ctx, cancel := context.WithTimeout(ctx, t.opts.StartTimeout)
	defer cancel()
	// The spare stub may have died meanwhile (a `pkill sleep` in a
	// context): then the handover fails, and a fresh stub is tried.
	for attempt := 0; ; attempt++ {
		stub, spare, err := t.takeStub(ctx, attempt == 0)
		if err != nil {
			return nil, Info{}, err
		}
		k, err := t.handOver(ctx, stub)
		if err == nil {
			var p *process
			var info Info
			p, info, err = newProcess(k, t.opts.lineCap()).awaitReady(ctx, t.opts.Python, nil)
			if err == nil {
				// The next spare starts once this context is ready: on a
				// busy machine it would compete with it for the CPU.
				t.refillStub()
				return p, info, nil
			}
		}
		if !spare || errors.Is(err, errNoPID) || ctx.Err() != nil || !t.alive() {
			return nil, Info{}, err
		}
	}
}

// handOver has the template give a forked child to stub.
func (t *template) handOver(ctx context.Context, stub Proc) (*forkedProc, error) {
	pp, ok := stub.(interface{ PID() int })
	if !ok || pp.PID() <= 0 {
		killStub(stub)
		return nil, errNoPID
	}
	ch := make(chan message, 1)
	t.mu.Lock()
	if t.dead {
		t.mu.Unlock()
		killStub(stub)
		return nil, fmt.Errorf("%w: the template interpreter is gone", ErrStart)
	}
	t.nextID++
	id := t.nextID
	t.waiting[id] = ch
	t.mu.Unlock()
	werr := t.send(map[string]any{"op": "fork", "n": id, "stub": pp.PID()})
	var reply message
	for reply.kind == "" {
		select {
		case err := <-werr:
			werr = nil
			if err == nil {
				continue
			}
			killStub(stub)
			return nil, fmt.Errorf("%w: asking the template to fork: %v", ErrStart, err)
		case m, ok := <-ch:
			if !ok {
				killStub(stub)
				return nil, fmt.Errorf("%w: the template interpreter died", ErrStart)
			}
			reply = m
		case <-ctx.Done():
			t.mu.Lock()
			delete(t.waiting, id)
			t.mu.Unlock()
			killStub(stub)
			return nil, fmt.Errorf("%w: the template did not fork: %v", ErrStart, ctx.Err())
		}
	}
	if reply.pid <= 0 {
		killStub(stub)
		return nil, fmt.Errorf("%w: the template could not fork: %s", ErrStart, reply.note)
	}
	k := &forkedProc{stub: stub, t: t, pid: reply.pid, exited: make(chan struct{})}
	t.mu.Lock()
	if code, ok := t.exits[k.pid]; ok {
		delete(t.exits, k.pid)
		k.setExit(code)
	} else if !t.dead {
		t.kids[k.pid] = k
	}
	dead := t.dead
	t.mu.Unlock()
	if dead {
		_ = stub.Kill()
	}
	return k, nil
}

// forkedProc is a forked context as a Proc: the stub's streams, the
// template's signals, the child's exit code.
type forkedProc struct {
	stub Proc
	t    *template
	pid  int

	exitOnce sync.Once
	exited   chan struct{} // closed once code is set
	code     int

	waitOnce sync.Once
	waitCode int
	waitErr  error
}

func (k *forkedProc) setExit(code int) {
	k.exitOnce.Do(func() {
		k.code = code
		close(k.exited)
	})
}

func (k *forkedProc) Stdin() io.Writer  { return k.stub.Stdin() }
func (k *forkedProc) Stdout() io.Reader { return k.stub.Stdout() }

// Signal signals the context's process group, through the template (its
// parent).
func (k *forkedProc) Signal(sig syscall.Signal) error {
	select {
	case <-k.t.done:
		return fmt.Errorf("pykernel: the template interpreter is gone")
	default:
	}
	// The write is asynchronous (a stuck template must not block a run);
	// its error surfaces when the template's end is noticed.
	k.t.send(map[string]any{"op": "signal", "pid": k.pid, "sig": int(sig)})
	return nil
}

// Kill kills the stub's command (the agent reaches the child by its tag)
// and has the template kill the child's group as well.
func (k *forkedProc) Kill() error {
	if k.t.alive() {
		k.t.send(map[string]any{"op": "signal", "pid": k.pid, "sig": int(syscall.SIGKILL)})
	}
	return k.stub.Kill()
}

// Wait waits for the stub and returns the child's exit code as the template
// reported it (the stub's own when no report comes).
func (k *forkedProc) Wait() (int, error) {
	k.waitOnce.Do(func() {
		k.waitCode, k.waitErr = k.stub.Wait()
		// The template reports the exit before it kills the stub, but the
		// two travel on different streams.
		select {
		case <-k.exited:
			k.waitCode, k.waitErr = k.code, nil
		case <-k.t.done:
		case <-time.After(time.Second):
		}
	})
	return k.waitCode, k.waitErr
}
