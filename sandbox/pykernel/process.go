package pykernel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Pseudo message kinds made by the reader for lines that are not messages.
const (
	kindJunk    = "junk"     // a line that is not a driver message
	kindTooLong = "too-long" // a line over the line cap, skipped
)

// msgQueue is how many decoded messages may wait for Run; with the line cap
// it bounds the memory a driver can make the Go side hold.
const msgQueue = 8

// process is one running driver: the Proc, and the goroutine that decodes
// its stdout into msgs.
type process struct {
	proc       Proc
	msgs       chan message // closed when stdout ends
	stop       chan struct{}
	readerDone chan struct{}
	writers    sync.WaitGroup

	stopOnce sync.Once
	gone     chan struct{} // made by the first teardown; closed once the process and its goroutines are gone
	waitOnce sync.Once
	code     int
	waitErr  error
}

// startProcess starts the interpreter, sends it the driver and waits for the
// driver's ready message. With opts.Imports the driver imports them first.
func startProcess(ctx context.Context, start Starter, opts Options) (*process, Info, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	argv := []string{opts.Python, "-u", "-c", bootstrap}
	if len(opts.Imports) > 0 {
		argv = append(append(argv, "imports"), opts.Imports...)
	}
	return launchDriver(ctx, start, argv, opts, opts.lineCap())
}

// launchDriver starts argv (the interpreter with the bootstrap), sends it the
// driver and waits for its ready message.
func launchDriver(ctx context.Context, start Starter, argv []string, opts Options, lineCap int) (*process, Info, error) {
	env := opts.Env
	if env == nil {
		env = []string{} // explicitly empty: a Starter must never read nil as "inherit"
	}
	proc, err := start(ctx, argv, env, opts.Dir)
	if err != nil {
		return nil, Info{}, fmt.Errorf("%w: %s: %v", ErrStart, opts.Python, err)
	}
	p := newProcess(proc, lineCap)
	werr := p.write([]byte(fmt.Sprintf("%08d", len(driverSource)) + driverSource))
	return p.awaitReady(ctx, opts.Python, werr)
}

// newProcess wraps a started Proc and starts decoding its stdout.
func newProcess(proc Proc, lineCap int) *process {
	p := &process{
		proc:       proc,
		msgs:       make(chan message, msgQueue),
		stop:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	go p.read(lineCap)
	return p
}

// awaitReady waits for the driver's ready message; werr, if not nil, yields
// the result of sending the driver. On failure the process is torn down.
func (p *process) awaitReady(ctx context.Context, python string, werr <-chan error) (*process, Info, error) {
	var junk []string
	var sendErr error
	var gone <-chan time.Time // set when sending the driver hit a closed pipe
	fail := func(sentinel error, format string, args ...any) (*process, Info, error) {
		ended := p.teardown()
		msg := fmt.Sprintf(format, args...)
		if len(junk) > 0 {
			msg += "; it printed: " + strings.Join(junk, "\n")
		}
		if !ended {
			return nil, Info{}, fmt.Errorf("%w: %s (killed; its end was not reported within %v)", sentinel, msg, killGrace)
		}
		code, _ := p.wait()
		return nil, Info{}, fmt.Errorf("%w: %s (exit code %d)", sentinel, msg, code)
	}
	for {
		select {
		case m, ok := <-p.msgs:
			if !ok {
				return fail(ErrStart, "%s exited before the kernel driver was ready", python)
			}
			switch m.kind {
			case msgReady:
				return p, Info{PID: m.ready.pid, Version: m.ready.version, Executable: m.ready.executable}, nil
			case msgFatal:
				return fail(ErrStart, "%s", m.note)
			case msgImportErr:
				return fail(ErrImport, "import %s failed: %s", m.note, m.err.Error())
			case kindJunk:
				if len(junk) < 40 {
					junk = append(junk, m.note)
				}
			}
		case err := <-werr:
			werr = nil
			if err != nil && !errors.Is(err, syscall.EPIPE) {
				return fail(ErrStart, "sending the driver: %v", err)
			}
			if err != nil {
				// The interpreter closed its stdin: usually it has exited
				// (not a Python, or it failed at once), which the closing of
				// its stdout reports with a better message. Wait briefly
				// for that rather than racing it.
				sendErr = err
				gone = time.After(2 * time.Second)
			}
		case <-gone:
			return fail(ErrStart, "sending the driver: %v", sendErr)
		case <-ctx.Done():
			return fail(ErrStart, "%s did not start the driver: %v", python, ctx.Err())
		}
	}
}

// read decodes stdout until it ends or the process is torn down.
func (p *process) read(lineCap int) {
	defer close(p.readerDone)
	defer close(p.msgs)
	lr := newLineReader(p.proc.Stdout(), lineCap)
	for {
		line, err := lr.next()
		var m message
		switch {
		case err == errLineTooLong:
			m = message{kind: kindTooLong}
		case err != nil:
			return
		default:
			var derr error
			m, derr = decodeMessage(line)
			if derr != nil {
				note := line
				if len(note) > 2000 {
					note = note[:2000]
				}
				m = message{kind: kindJunk, note: strings.ToValidUTF8(string(note), "?")}
			}
		}
		select {
		case p.msgs <- m:
		case <-p.stop:
			return
		}
	}
}

// write sends data to the driver's stdin without blocking the caller; the
// returned channel yields the write's error.
func (p *process) write(data []byte) <-chan error {
	errc := make(chan error, 1)
	p.writers.Add(1)
	go func() {
		defer p.writers.Done()
		_, err := p.proc.Stdin().Write(data)
		errc <- err
	}()
	return errc
}

// killGrace bounds how long teardown waits, after Kill, for the Proc to
// report the process's end. A killed process ends within milliseconds
// where its Proc answers (SIGKILL cannot be caught; the sandbox's agent
// reports the exit as soon as it reaps it), so 2 s is ample under load.
// It is the same grace the agent client gives a cancelled call
// (agent.cancelGrace). A Proc that does not report the end in time is
// behind an agent that stopped reading its stream (SIGSTOP, frozen,
// hostile): its Wait returned only when the sandbox closed, and Run hung
// with it (a Python.Run with a 2 s deadline had not returned after 30 s).
const killGrace = 2 * time.Second

// teardown kills the process and waits until none of its goroutines is
// left, or for killGrace when the Proc does not report the process's end:
// then the process is given up and teardown reports false. The end is
// still awaited in the background (Kill is sent again while it fails, so
// that a process whose agent reads again is killed then), and the
// goroutines end when the Proc reports the end or fails (the sandbox
// closes). It is idempotent and safe to call concurrently; p.wait's result
// is final once teardown reported true.
func (p *process) teardown() bool {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.gone = make(chan struct{})
		killed := make(chan error, 1)
		go func() { killed <- p.proc.Kill() }()
		go p.collect(killed)
	})
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-p.gone:
		return true
	case <-t.C:
		return false
	}
}

// collect waits for the killed process's end and for its goroutines, and
// closes p.gone. A Kill that failed (it could not be sent) is tried again
// every killGrace until one is sent or the process has ended.
func (p *process) collect(killed chan error) {
	waited := make(chan struct{})
	go func() {
		_, _ = p.wait()
		close(waited)
	}()
	var retry <-chan time.Time
	for done := false; !done; {
		select {
		case <-waited:
			done = true
		case err := <-killed:
			if err != nil {
				retry = time.After(killGrace)
			}
		case <-retry:
			retry = nil
			go func() { killed <- p.proc.Kill() }()
		}
	}
	<-p.readerDone
	p.writers.Wait()
	close(p.gone)
}

func (p *process) wait() (int, error) {
	p.waitOnce.Do(func() { p.code, p.waitErr = p.proc.Wait() })
	return p.code, p.waitErr
}
