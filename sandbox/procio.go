package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"syscall"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// agentProc is a long-lived process inside the sandbox (a Python kernel
// driver, a bash session on a pty) seen as plain streams. It is the only
// place the Python and shell engines meet the agent protocol, so both work
// unchanged on every backend.
type agentProc struct {
	call *agent.Call
	pid  int  // as the sandbox sees it, from the "started" event
	pty  bool // a terminal (a bash session): see Write

	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte // stdout chunks not yet read; bounded by the agent's window
	errBuf  []byte   // the last bytes of stderr, for diagnostics
	unacked int      // stderr bytes not yet credited back
	ended   bool
}

// maxProcStderr bounds the stderr kept from a long-lived process.
const maxProcStderr = 16 << 10

// startProc starts argv in the sandbox with stdin open (and on a pty if
// pty is set). dir is relative to the workspace.
func (sb *Sandbox) startProc(ctx context.Context, op string, argv, env []string, dir string, pty bool) (*agentProc, error) {
	if err := sb.check(op); err != nil {
		return nil, err
	}
	p := &agentProc{pty: pty}
	p.cond = sync.NewCond(&p.mu)
	h := agent.Handlers{
		ManualAck: true,
		OnData: func(t wire.FrameType, b []byte) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if t == wire.FrameStderr {
				p.errBuf = append(p.errBuf, b...)
				if over := len(p.errBuf) - maxProcStderr; over > 0 {
					p.errBuf = append(p.errBuf[:0], p.errBuf[over:]...)
				}
				// Credit for stderr is returned with the next stdout read
				// (the call may not be known yet on this goroutine).
				p.unacked += len(b)
				p.cond.Broadcast()
				return
			}
			p.queue = append(p.queue, b)
			p.cond.Broadcast()
		},
	}
	var started = make(chan struct{})
	h.OnEvent = func(ev wire.Event) {
		if ev.Kind == "started" {
			select {
			case <-started:
			default:
				p.pid = ev.PID // read after started is closed
				close(started)
			}
		}
	}
	call, err := sb.client.StartContext(ctx, wire.OpExec.Name, wire.ExecRequest{Args: argv, Env: env, Dir: dir, Stdin: true, Pty: pty, Events: true}, h)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	p.mu.Lock()
	p.call = call
	p.mu.Unlock()
	go func() {
		<-call.Done()
		p.mu.Lock()
		p.ended = true
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	select {
	case <-started:
	case <-call.Done():
		if _, err := call.Wait(); err != nil {
			return nil, wrapErr(op, err)
		}
	case <-ctx.Done():
		call.Cancel()
		return nil, wrapErr(op, ctx.Err())
	}
	return p, nil
}

// Read returns the process's output (stdout, or the terminal for a pty),
// io.EOF once it has exited and everything was read.
func (p *agentProc) Read(b []byte) (int, error) {
	p.mu.Lock()
	for len(p.queue) == 0 && !p.ended {
		p.cond.Wait()
	}
	if len(p.queue) == 0 {
		p.mu.Unlock()
		return 0, io.EOF
	}
	n := copy(b, p.queue[0])
	if n == len(p.queue[0]) {
		p.queue = p.queue[1:]
	} else {
		p.queue[0] = p.queue[0][n:]
	}
	credit := n + p.unacked
	p.unacked = 0
	p.mu.Unlock()
	p.call.Ack(credit)
	return n, nil
}

// Write types into the process's stdin (or terminal). Input the stream
// cannot take now (agent.ErrStalled: the agent reads nothing while a
// given-up request still occupies the stream; nothing of it was sent) is
// an error for the Python kernel, which then reports the code as not sent.
// A terminal's input instead stays pending until it is taken or the
// session ends (shell.Session.write's promise): dropped, the terminal
// kept the typed prefix and the next input was appended to it (review R2
// of session 8).
func (p *agentProc) Write(b []byte) (int, error) {
	written := 0
	for {
		n, err := p.call.Write(b[written:])
		written += n
		if err == nil || !p.pty || !errors.Is(err, agent.ErrStalled) {
			return written, err
		}
		select {
		case <-p.call.Done():
			return written, io.ErrClosedPipe
		default: // each try waits for the stream (the stall's bound)
		}
	}
}

// PID is the process id as processes in the sandbox see it (the Python
// kernel's template forks contexts for such a process).
func (p *agentProc) PID() int { return p.pid }

func (p *agentProc) Stdin() io.Writer  { return p }
func (p *agentProc) Stdout() io.Reader { return p }

func (p *agentProc) Signal(sig syscall.Signal) error {
	return p.call.Signal(wire.SignalRequest{Signal: int(sig)})
}

func (p *agentProc) SignalForeground(sig syscall.Signal) error {
	return p.call.Signal(wire.SignalRequest{Signal: int(sig), Foreground: true})
}

// Kill ends the process and everything it started. Its error says the
// kill could not be sent (agent.ErrStalled: the agent reads nothing and
// the stream is still taken by a given-up request); the engines then try
// again until the call ends, so that the process dies once the agent
// reads again.
func (p *agentProc) Kill() error {
	err := p.call.Signal(wire.SignalRequest{Signal: int(syscall.SIGKILL), Group: true})
	p.call.Cancel()
	return err
}

// Wait returns the exit code once the process has ended.
func (p *agentProc) Wait() (int, error) {
	raw, err := p.call.Wait()
	if err != nil {
		return -1, wrapErr("process", err)
	}
	var rep wire.ExecReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return -1, wrapErr("process", err)
	}
	return rep.ExitCode, nil
}

// stderrTail returns the last bytes the process wrote to stderr.
func (p *agentProc) stderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.errBuf)
}
