package server

// A command's output on its way out: the pumps that read its pipes, the
// head+tail capture of a streamed command, the output file
// (ExecRequest.OutputFile), and the end of the output once the process
// exited (drainOutput).

import (
	"errors"
	"os"
	"path"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/runner"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// outputFile writes a command's whole output to a workspace file as it is
// read, in arrival order, up to a cap. Nothing is lost silently: bytes
// past the cap are counted (cut), and a failed write (a full disk, the
// quota) is kept as the report's error, with the bytes written before it.
type outputFile struct {
	mu    sync.Mutex
	f     *os.File
	limit int64
	rep   wire.OutputFileReport
}

// openOutputFile creates (or truncates) the file p names for a command's
// output. A path that is not a workspace path is the caller's mistake and
// refused; a file that cannot be made for other reasons (permissions, a
// full disk) does not stop the command: the report says why it is empty.
func (s *server) openOutputFile(p string, limit int64) (*outputFile, *wire.WireError) {
	if p == "" {
		return nil, nil
	}
	if limit < 0 {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "output file limit %d is negative", limit)
	}
	rel, werr := s.ws.rel(p)
	if werr != nil {
		return nil, werr
	}
	if rel == "." {
		return nil, wire.Errorf(wire.CodeIsDir, "output file %q is the workspace itself: name a file", p)
	}
	if limit == 0 {
		limit = wire.DefaultOutputFileLimit
	}
	if s.ws.fsize > 0 && limit > s.ws.fsize {
		limit = s.ws.fsize // what the file-size limit lets any file hold
	}
	o := &outputFile{limit: limit, rep: wire.OutputFileReport{OutputFile: p}}
	if dir := path.Dir(rel); dir != "." {
		if err := s.ws.root.MkdirAll(dir, 0o755); err != nil {
			o.rep.OutputFileError = fsError(p, err).Message
			return o, nil
		}
	}
	f, _, e := s.ws.openFile(rel, p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o644)
	if e != nil {
		o.rep.OutputFileError = e.Message
		return o, nil
	}
	o.f = f
	return o, nil
}

// write appends b (up to the cap) and counts what does not fit.
func (o *outputFile) write(b []byte) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		// Never opened, or failed: what is not in the file is not
		// "cut" by the limit; the error says why the file ends early.
		return
	}
	room := o.limit - o.rep.OutputFileBytes
	n := int64(len(b))
	if n > room {
		o.rep.OutputFileCut += n - room
		b = b[:room]
	}
	if len(b) == 0 {
		return
	}
	m, err := o.f.Write(b)
	o.rep.OutputFileBytes += int64(m)
	if err != nil {
		o.rep.OutputFileError = fsError(o.rep.OutputFile, err).Message
		o.f.Close()
		o.f = nil
	}
}

// close closes the file and returns the final report.
func (o *outputFile) close() wire.OutputFileReport {
	if o == nil {
		return wire.OutputFileReport{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f != nil {
		if err := o.f.Close(); err != nil && o.rep.OutputFileError == "" {
			o.rep.OutputFileError = fsError(o.rep.OutputFile, err).Message
		}
		o.f = nil
	}
	return o.rep
}

// report returns the report so far (for a running job).
func (o *outputFile) report() wire.OutputFileReport {
	if o == nil {
		return wire.OutputFileReport{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rep
}

// finalDrainMax bounds what pump still reads from a pipe once told to stop:
// what a pipe buffer holds by default, twice.
const finalDrainMax = 128 << 10

// pump reads f until EOF, calling emit for every chunk. stopPump ends it
// early: it then reads what the pipe holds at that moment (up to
// finalDrainMax) and returns.
func pump(f runner.Output, emit func([]byte)) {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	if pumpRaw(f, buf, emit) {
		return
	}
	for {
		n, err := f.Read(buf)
		if n > 0 {
			emit(buf[:n])
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainNow(f, buf, emit)
			}
			return
		}
	}
}

// pumpRaw is pump for a pipe or terminal served by the runtime's poller,
// read with raw system calls (readRaw says why); it reports false, having
// read nothing, where f is not such a file.
func pumpRaw(f runner.Output, buf []byte, emit func([]byte)) bool {
	sc, ok := f.(syscall.Conn)
	if !ok || runtime.GOOS != "linux" {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	nb := false
	if rc.Control(func(fd uintptr) { nb = nonblocking(fd) }) != nil || !nb {
		return false
	}
	for {
		n := 0
		err := rc.Read(func(fd uintptr) bool {
			n = readRaw(fd, buf)
			// Not ready: wait for the poller (EINTR: read again).
			return n != -int(syscall.EAGAIN) && n != -int(syscall.EINTR)
		})
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainNow(f, buf, emit)
			}
			return true
		}
		if n <= 0 {
			return true // EOF, or a read error (EIO: a terminal hung up)
		}
		emit(buf[:n])
	}
}

// pumpBufs holds pump's buffers: every command reads its output through
// two of them (64 KiB), which was most of what a command allocated.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, wire.ChunkSize); return &b }}

// stopPump makes pump on f return after reading what f holds now.
func stopPump(f runner.Output) { _ = f.SetReadDeadline(time.Now()) }

// drainNow reads what f holds right now without waiting for more.
func drainNow(f runner.Output, buf []byte, emit func([]byte)) {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return // an in-memory pipe (the fake's): nothing is left behind in it
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < finalDrainMax; {
		n := 0
		_ = rc.Read(func(fd uintptr) bool {
			n = readFD(fd, buf)
			return true // never wait for the poller
		})
		if n <= 0 {
			return
		}
		emit(buf[:n])
		total += n
	}
}

// drainOutput waits until the readers of a command's pipes (stdout and
// stderr, stderr nil for a pty) have seen EOF, after its main process
// exited. The output is read to its end however slowly the caller
// consumes it; the only bound is for processes the command left running
// that keep a pipe open (a daemon that did not close its stdout): after
// drainGrace the pipes are read out as they stand and closed, and those
// processes are returned, so the reply can say so.
func drainOutput(drained <-chan struct{}, p runner.Process) (leftRunning []int) {
	select {
	case <-drained:
		return nil
	case <-time.After(drainGrace):
	}
	holders := p.OutputHolders()
	if len(holders) > 0 {
		// A child may hold the pipes only for a moment more: one forked
		// just before the exit that has yet to redirect its output or
		// exit (seen under load). Look once more.
		select {
		case <-drained:
			return nil
		case <-time.After(drainGrace / 2):
		}
		holders = p.OutputHolders()
	}
	if len(holders) == 0 {
		// Every writer is gone, and none can come back (a pipe's end
		// passes only from a process that holds it): what is left in the
		// pipes is finite and ends in EOF. A reader slowed by its
		// consumer is waited for.
		<-drained
		return nil
	}
	stopPump(p.Stdout())
	if p.Stderr() != nil {
		stopPump(p.Stderr())
	}
	<-drained
	return holders
}

// maxCapture caps ExecRequest.MaxOutput.
const maxCapture = 8 << 20

// capture keeps the head of a stream (streamed as produced) and a tail
// ring, dropping and counting the middle.
type capture struct {
	headLeft int
	limited  bool
	tail     []byte
	tailCap  int
	dropped  int64
}

func newCapture(max int) *capture {
	if max <= 0 {
		return &capture{}
	}
	// Both tails travel base64-encoded in one reply frame (MaxPayload).
	max = min(max, maxCapture)
	head := max / 2
	return &capture{headLeft: head, limited: true, tailCap: max - head}
}

// add returns the part of b to stream now; the rest is kept in the tail.
func (c *capture) add(b []byte) []byte {
	if !c.limited {
		return b
	}
	n := min(len(b), c.headLeft)
	c.headLeft -= n
	out, rest := b[:n], b[n:]
	if len(rest) > 0 {
		c.tail = append(c.tail, rest...)
		if over := len(c.tail) - c.tailCap; over > 0 {
			c.dropped += int64(over)
			c.tail = append(c.tail[:0], c.tail[over:]...)
		}
	}
	return out
}
