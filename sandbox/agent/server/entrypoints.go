package server

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// ServeProcess is Serve for a process whose only job is to be the agent,
// and the one entry point every backend's agent goes through: the local
// backend's agent stage, the Docker container's PID 1 (the standalone
// cmd/sandboxkit-agent and a program that is its own agent alike) and any
// later backend. Before it reads the first frame it hardens the process
// (see hardenProcess) and checks that the kernel confines opens the way
// the file API relies on (checkConfinement): commands run as the agent's
// uid, so every
// protection of the agent from its own commands belongs here, where no
// backend can start an agent without it. A hardening step that fails is
// an error: the agent does not serve unprotected.
//
// It is not for an agent served inside a larger program (tests, the fake
// backend): that program's environment and debuggability are its own.
//
// The incident behind it: the undumpable flag was once set in two of three
// entry points; the Docker backend's self-agent path (a CGO_ENABLED=0
// program copied into the container as its own agent) missed it, and a
// command could open the agent's stdout through /proc/1/fd and write
// protocol frames the host trusted.
func ServeProcess(conn io.ReadWriteCloser, opts ServeOptions) error {
	if err := hardenProcess(); err != nil {
		err = fmt.Errorf("agent: refusing to serve: %w", err)
		refuseHello(conn, err)
		return err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := checkConfinement(logf, opts.ScratchDir); err != nil {
		err = fmt.Errorf("agent: refusing to serve: %w", err)
		refuseHello(conn, err)
		return err
	}
	return Serve(conn, opts)
}

// refuseHello answers the client's handshake with err, so that sandbox
// creation fails with the reason instead of a closed stream, and closes
// conn.
func refuseHello(conn io.ReadWriteCloser, err error) {
	defer conn.Close()
	if _, rerr := wire.ReadFrame(conn); rerr != nil {
		return
	}
	msg, _ := json.Marshal(wire.Reply{Error: &wire.WireError{Code: driver.CodeIsolationUnavailable, Message: err.Error()}})
	_ = wire.WriteFrame(conn, 0, wire.FrameHelloOK, msg)
}

// ProbeArg is the argument with which a container backend runs the agent
// binary as ProbeSyscalls instead of as the agent (the binary is the one
// program a backend knows is in the container, whatever the image).
const ProbeArg = "__sandboxkit_probe_syscalls__"

// StdioWarmThreads is the number of OS threads ServeStdio makes before the
// agent may start a process (ServeOptions.ProcessesReady). A container's
// pids limit counts threads, and the Go runtime aborts the whole process
// when it cannot create one ("failed to create new OS thread"): a fork
// bomb that filled the limit first would kill the agent, PID 1, and with
// it the container and its workspace. Threads made while the limit has
// room stay in the runtime's idle pool and serve the agent's later
// blocking system calls. The backend adds StdioTaskReserve to the
// container's limit for them.
const StdioWarmThreads = 16

// StdioTaskReserve is what a backend running ServeStdio adds to the
// commands' pids limit for the agent's own tasks: the warm threads plus
// the runtime's (main thread, sysmon, the thread blocked reading stdin),
// with room to spare for a few more blocking calls at once.
const StdioTaskReserve = 24

// ServeStdio runs ServeProcess on standard input and output, the stream a
// container engine attaches to, and returns the process's exit status. It
// makes the agent's threads (StdioWarmThreads) in parallel with the
// handshake and starts no process before they exist, then narrows the
// scheduler to one P (NarrowProcs). Diagnostics go to standard error with
// the given prefix.
func ServeStdio(prefix string) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, prefix+format+"\n", args...)
	}
	ready := make(chan struct{})
	go func() {
		// Not narrowed before: with one P the threads would be made one
		// after the other, each waiting for the previous one to block.
		warmThreads(StdioWarmThreads)
		NarrowProcs()
		close(ready)
	}()
	if err := ServeProcess(stdioStream{}, ServeOptions{ProcessesReady: ready, Logf: logf}); err != nil {
		logf("%v", err)
		return 1
	}
	return 0
}

// warmThreads makes the Go runtime create n OS threads now: each goroutine
// holds its own thread until all are running. After UnlockOSThread the
// threads stay in the runtime's idle pool.
func warmThreads(n int) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}

// stdioStream joins standard input and output into one stream.
type stdioStream struct{}

func (stdioStream) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdioStream) Write(p []byte) (int, error) { return os.Stdout.Write(p) }

// Close ends both directions, so that the host sees EOF even if a child
// process still holds a copy of the agent's stdout.
func (stdioStream) Close() error {
	errIn := os.Stdin.Close()
	errOut := os.Stdout.Close()
	if errIn != nil {
		return errIn
	}
	return errOut
}
