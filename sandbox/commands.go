package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Command is one program to run in the sandbox, like exec.Cmd: a plain
// struct the caller fills in.
type Command struct {
	// Args is the program and its arguments (argv). Either Args or Shell
	// must be set.
	Args []string
	// Shell is a command line run by /bin/sh -c.
	Shell string
	// Dir is the working directory, relative to the workspace or absolute
	// under it. Empty means the workspace.
	Dir string
	// Env adds variables to the sandbox's environment for this command.
	Env map[string]string
	// Stdin, when set, is copied to the command's standard input.
	// Otherwise the command reads /dev/null.
	Stdin io.Reader
	// OpenStdin keeps a background job's stdin open for Job.Write.
	OpenStdin bool
	// Timeout bounds the run (default Limits.Timeout; at most
	// Limits.MaxTimeout). A job has no timeout unless set.
	Timeout time.Duration
	// OnOutput, when set, receives output chunks in order as they are
	// produced (from the agent's reader; it must not block for long).
	OnOutput func(Chunk)
	// OutputFile, when set, is a workspace path (relative to the
	// workspace, or absolute under it) to which the agent writes every
	// byte the command prints, stdout and stderr interleaved in arrival
	// order, as it is produced, whatever Limits.MaxOutputBytes keeps in
	// the Result. Parent directories are created; an existing file is
	// replaced. Works for Run and Start (jobs).
	OutputFile string
	// OutputFileLimit caps the file's size (0: DefaultOutputFileLimit).
	// Bytes past it are counted in Result.OutputFileCut, not written.
	OutputFileLimit int64
}

// DefaultOutputFileLimit is the size cap of a Command.OutputFile when
// OutputFileLimit is 0 (64 MiB). Limits.FileSizeBytes, when smaller,
// caps it too.
const DefaultOutputFileLimit = 64 << 20

// Stream names an output stream.
type Stream int

// The output streams.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// Chunk is a piece of a command's output.
type Chunk struct {
	// Stream says which stream Data was written to.
	Stream Stream
	// Data is the bytes, as the command wrote them.
	Data []byte
}

// Result is the outcome of a command that ran. A non-zero exit is data,
// not an error.
type Result struct {
	// ExitCode is the command's exit status (128+N when signal N killed
	// it, as a shell reports it).
	ExitCode int
	// Signal names the signal that killed the command ("SIGKILL"), if any.
	Signal string
	// Stdout and Stderr are what the command printed on each stream,
	// cut in the middle past Limits.MaxOutputBytes.
	Stdout string
	Stderr string
	// Duration is the command's wall time.
	Duration time.Duration
	// TimedOut reports that the command was killed at its timeout (Run
	// then also returns ErrTimeout).
	TimedOut bool
	// StdoutDropped and StderrDropped count bytes cut from the middle of
	// the output (a marker in the text says where). Every byte the
	// command printed is either in Stdout/Stderr or counted here.
	StdoutDropped int64
	StderrDropped int64
	// LeftRunning lists processes the command left running (started in
	// the background) that still held its stdout or stderr open when it
	// exited. The agent reads the output to its end, except in this case:
	// shortly after the exit it takes what those processes have written
	// and stops, so what they print later is not in the Result (nor in
	// the OutputFile). Empty normally.
	LeftRunning []int
	// Killed counts the processes besides the command itself that its
	// timeout (or a cancelled ctx) killed: its tree and the daemons it
	// started outside it. Survivors lists those still alive after that
	// kill (none normally; they end at Close).
	Killed    int
	Survivors []int
	OutputFileInfo
}

// OutputFileInfo says what became of a Command.OutputFile.
type OutputFileInfo struct {
	// OutputFile is the path written ("" when none was requested).
	OutputFile string
	// OutputFileBytes counts the bytes in the file.
	OutputFileBytes int64
	// OutputFileCut counts bytes not written because of OutputFileLimit.
	OutputFileCut int64
	// OutputFileError is set when writing the file failed (a full disk,
	// the quota, a path that cannot be created): the file then holds only
	// the first OutputFileBytes bytes of the output. Never silent.
	OutputFileError string
}

func outputFileInfo(r wire.OutputFileReport) OutputFileInfo {
	return OutputFileInfo{OutputFile: r.OutputFile, OutputFileBytes: r.OutputFileBytes,
		OutputFileCut: r.OutputFileCut, OutputFileError: r.OutputFileError}
}

// Commands runs one-shot commands and background jobs.
type Commands struct{ sb *Sandbox }

func argv(op string, cmd Command) ([]string, error) {
	// The protocol is JSON, which would silently turn invalid UTF-8 into
	// U+FFFD: the command would run with other bytes than the caller gave.
	for _, s := range append([]string{cmd.Shell, cmd.Dir}, cmd.Args...) {
		if !utf8.ValidString(s) {
			return nil, newError(CodeInvalidArgument, op, "%q is not valid UTF-8: commands, arguments and dirs must be text (write such bytes from a script instead)", s)
		}
	}
	for k, v := range cmd.Env {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, newError(CodeInvalidArgument, op, "environment variable %q is not valid UTF-8", k)
		}
	}
	switch {
	case len(cmd.Args) > 0 && cmd.Shell != "":
		return nil, newError(CodeInvalidArgument, op, "set either Args or Shell, not both")
	case cmd.Shell != "":
		return []string{"/bin/sh", "-c", cmd.Shell}, nil
	case len(cmd.Args) > 0:
		return cmd.Args, nil
	}
	return nil, newError(CodeInvalidArgument, op, "the command is empty: set Args or Shell")
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func summary(args []string) string {
	s := strings.Join(args, " ")
	if len(args) == 3 && args[0] == "/bin/sh" && args[1] == "-c" {
		s = args[2]
	}
	return s
}

// cutMarker is inserted where output was dropped.
func cutMarker(stream string, n int64) string {
	return fmt.Sprintf("\n[... sandboxkit: %d bytes of %s cut here; the output limit is per stream (Limits.MaxOutputBytes) ...]\n", n, stream)
}

// Run runs a command to completion and returns its output. On timeout the
// whole process tree is killed and Run returns the partial Result together
// with an error matching ErrTimeout.
func (c *Commands) Run(ctx context.Context, cmd Command) (*Result, error) {
	const op = "Commands.Run"
	start := time.Now()
	res, err := c.run(ctx, cmd)
	args, _ := argv(op, cmd)
	c.sb.auditEvent(ctx, op, summary(args), start, err)
	return res, err
}

func (c *Commands) run(ctx context.Context, cmd Command) (*Result, error) {
	const op = "Commands.Run"
	sb := c.sb
	if err := sb.check(op); err != nil {
		return nil, err
	}
	args, err := argv(op, cmd)
	if err != nil {
		return nil, err
	}
	timeout, err := sb.timeoutFor(op, cmd.Timeout)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var stdout, stderr strings.Builder
	h := agent.Handlers{OnData: func(t wire.FrameType, b []byte) {
		mu.Lock()
		if t == wire.FrameStdout {
			stdout.Write(b)
		} else {
			stderr.Write(b)
		}
		mu.Unlock()
		if cmd.OnOutput != nil {
			s := Stdout
			if t == wire.FrameStderr {
				s = Stderr
			}
			cmd.OnOutput(Chunk{Stream: s, Data: append([]byte(nil), b...)})
		}
	}}
	req := wire.ExecRequest{
		Args: args, Dir: cmd.Dir, Env: envList(cmd.Env), Stdin: cmd.Stdin != nil,
		TimeoutMs: timeout.Milliseconds(), MaxOutput: sb.cfg.limits.MaxOutputBytes,
		OutputFile: cmd.OutputFile, OutputFileLimit: cmd.OutputFileLimit,
	}
	var raw json.RawMessage
	if cmd.Stdin == nil {
		// This goroutine reads the reply itself where it can
		// (DoStreaming): no hand-off from the client's reader.
		raw, err = sb.client.DoStreaming(ctx, wire.OpExec.Name, req, h)
	} else {
		var call *agent.Call
		if call, err = sb.client.StartContext(ctx, wire.OpExec.Name, req, h); err != nil {
			return nil, wrapErr(op, err)
		}
		// Input the stream could not take (agent.ErrStalled: the agent
		// reads nothing) ends the command: closing its stdin instead made
		// it see EOF after part of its input, and a script piped to sh
		// cut mid-line runs what it got; Run then reported success.
		in := &sinkErr{w: call}
		go func() {
			_, _ = io.Copy(in, cmd.Stdin)
			if in.failed() != nil {
				call.Cancel()
				return
			}
			_ = call.CloseInput()
		}()
		raw, err = call.WaitContext(ctx)
		if werr := in.failed(); werr != nil {
			return nil, &Error{Code: CodeOf(wrapErr(op, werr)), Op: op, Err: werr,
				Message: fmt.Sprintf("the command's input could not be sent in full (%v); the command was stopped, and may have run with part of its input", werr)}
		}
	}
	if err != nil {
		return nil, wrapErr(op, err)
	}
	var rep wire.ExecReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, wrapErr(op, fmt.Errorf("%w: %v", wire.ErrProtocol, err))
	}
	mu.Lock()
	out, errOut := stdout.String(), stderr.String()
	mu.Unlock()
	res := &Result{
		ExitCode: rep.ExitCode, Signal: rep.Signal, Duration: time.Duration(rep.DurationNs),
		TimedOut: rep.TimedOut, StdoutDropped: rep.StdoutDropped, StderrDropped: rep.StderrDropped,
		LeftRunning: rep.LeftRunning, Killed: rep.Killed, Survivors: rep.Survivors,
		OutputFileInfo: outputFileInfo(rep.OutputFileReport),
	}
	res.Stdout = joinTail(out, rep.StdoutTail, rep.StdoutDropped, "stdout", cmd.OnOutput, Stdout)
	res.Stderr = joinTail(errOut, rep.StderrTail, rep.StderrDropped, "stderr", cmd.OnOutput, Stderr)
	if rep.TimedOut {
		return res, newError(CodeTimeout, op, "%q did not finish within %s and %s; partial output is in the result", summary(args), timeout, killedNote(rep))
	}
	return res, nil
}

// killedNote says what a timeout's kill did, and no more.
func killedNote(rep wire.ExecReply) string {
	s := "was killed"
	switch rep.Killed {
	case 0:
	case 1:
		s += ", with the 1 other process it had started"
	default:
		s += fmt.Sprintf(", with the %d other processes it had started", rep.Killed)
	}
	if n := len(rep.Survivors); n > 0 {
		s += fmt.Sprintf(", but %d of its processes could not be killed (pids %v) and run on until the sandbox closes", n, rep.Survivors)
	}
	return s
}

func joinTail(head string, tail []byte, dropped int64, name string, on func(Chunk), s Stream) string {
	if len(tail) == 0 && dropped == 0 {
		return head
	}
	var b strings.Builder
	b.WriteString(head)
	if dropped > 0 {
		m := cutMarker(name, dropped)
		b.WriteString(m)
		if on != nil {
			on(Chunk{Stream: s, Data: []byte(m)})
		}
	}
	b.Write(tail)
	if on != nil && len(tail) > 0 {
		on(Chunk{Stream: s, Data: tail})
	}
	return b.String()
}

// Job is a background process started with Commands.Start. Its output is
// kept in a bounded ring buffer in the sandbox and read incrementally.
type Job struct {
	// ID names the job (e.g. "job-3").
	ID string
	sb *Sandbox
}

// JobStatus describes a job.
type JobStatus struct {
	// ID names the job, for Commands.Job.
	ID string
	// Args is the job's command line (argv).
	Args []string
	// PID is the job's process id, as the sandbox sees it.
	PID int
	// Running is set until the job ends; ExitCode and Signal are then
	// set as in Result.
	Running  bool
	ExitCode int
	Signal   string
	// Started and Ended are when the job started and ended (zero while
	// it runs).
	Started time.Time
	Ended   time.Time
	// Written counts every output byte the job produced so far.
	Written int64
	// LeftRunning: see Result (set once the job ended).
	LeftRunning []int
	// The job's Command.OutputFile so far (final once it ended).
	OutputFileInfo
}

// JobOutput is output read from a cursor.
type JobOutput struct {
	// Data is stdout and stderr interleaved as produced.
	Data string
	// Next is the cursor to pass to the next Output call.
	Next int64
	// Dropped counts bytes after the cursor that the ring buffer no longer
	// held (printed faster than they were read).
	Dropped int64
	// Status is the job's status when the output was read.
	Status JobStatus
}

func jobStatus(s wire.JobStatus) JobStatus {
	st := JobStatus{ID: s.ID, Args: s.Args, PID: s.PID, Running: s.Running, ExitCode: s.ExitCode, Signal: s.Signal,
		Started: time.Unix(0, s.StartedNs), Written: s.Written, LeftRunning: s.LeftRunning,
		OutputFileInfo: outputFileInfo(s.OutputFileReport)}
	if s.EndedNs > 0 {
		st.Ended = time.Unix(0, s.EndedNs)
	}
	return st
}

// jobRingBytes is the output kept per job.
const jobRingBytes = 1 << 20

// Start starts a background job and returns at once. Jobs live until they
// end, are killed, or the sandbox closes.
func (c *Commands) Start(ctx context.Context, cmd Command) (*Job, error) {
	const op = "Commands.Start"
	start := time.Now()
	j, err := c.start(ctx, cmd)
	args, _ := argv(op, cmd)
	c.sb.auditEvent(ctx, op, summary(args), start, err)
	return j, err
}

func (c *Commands) start(ctx context.Context, cmd Command) (*Job, error) {
	const op = "Commands.Start"
	sb := c.sb
	if err := sb.check(op); err != nil {
		return nil, err
	}
	args, err := argv(op, cmd)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if cmd.Timeout != 0 {
		if timeout, err = sb.timeoutFor(op, cmd.Timeout); err != nil {
			return nil, err
		}
	}
	var rep wire.ExecReply
	err = sb.client.Do(ctx, wire.OpExec.Name, wire.ExecRequest{
		Args: args, Dir: cmd.Dir, Env: envList(cmd.Env), Stdin: cmd.Stdin != nil || cmd.OpenStdin,
		TimeoutMs: timeout.Milliseconds(), Job: true, RingBytes: jobRingBytes,
		OutputFile: cmd.OutputFile, OutputFileLimit: cmd.OutputFileLimit,
	}, &rep)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	j := &Job{ID: rep.JobID, sb: sb}
	if cmd.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, rerr := cmd.Stdin.Read(buf)
				if n > 0 {
					if werr := j.Write(context.Background(), buf[:n]); werr != nil {
						return
					}
				}
				if rerr != nil {
					if !cmd.OpenStdin {
						_ = j.CloseStdin(context.Background())
					}
					return
				}
			}
		}()
	}
	return j, nil
}

// Job returns a handle for an existing job id (e.g. one a model passed
// back). Calls on it fail with SBX_NOT_FOUND if the job does not exist.
func (c *Commands) Job(id string) *Job { return &Job{ID: id, sb: c.sb} }

// Jobs lists the sandbox's jobs, running and ended, oldest first.
func (c *Commands) Jobs(ctx context.Context) ([]JobStatus, error) {
	const op = "Commands.Jobs"
	if err := c.sb.check(op); err != nil {
		return nil, err
	}
	var list []wire.JobStatus
	if err := c.sb.client.Do(ctx, wire.OpJobList.Name, nil, &list); err != nil {
		return nil, wrapErr(op, err)
	}
	out := make([]JobStatus, len(list))
	for i, s := range list {
		out[i] = jobStatus(s)
	}
	return out, nil
}

// Output returns the output produced since cursor (0 for the start),
// up to 4 MiB per call, and the cursor for the next call.
func (j *Job) Output(ctx context.Context, since int64) (*JobOutput, error) {
	const op = "Job.Output"
	if err := j.sb.check(op); err != nil {
		return nil, err
	}
	if since < 0 {
		return nil, newError(CodeInvalidArgument, op, "cursor %d is negative", since)
	}
	var out wire.JobOutput
	if err := j.sb.client.Do(ctx, wire.OpJobOutput.Name, wire.JobOutputRequest{ID: j.ID, Since: since}, &out); err != nil {
		return nil, wrapErr(op, err)
	}
	return &JobOutput{Data: string(out.Data), Next: out.Next, Dropped: out.Dropped, Status: jobStatus(out.Status)}, nil
}

// Status returns the job's state.
func (j *Job) Status(ctx context.Context) (JobStatus, error) {
	const op = "Job.Status"
	if err := j.sb.check(op); err != nil {
		return JobStatus{}, err
	}
	var st wire.JobStatus
	if err := j.sb.client.Do(ctx, wire.OpJobStatus.Name, wire.JobRef{ID: j.ID}, &st); err != nil {
		return JobStatus{}, wrapErr(op, err)
	}
	return jobStatus(st), nil
}

// Wait blocks until the job ends or ctx is done.
func (j *Job) Wait(ctx context.Context) (JobStatus, error) {
	const op = "Job.Wait"
	if err := j.sb.check(op); err != nil {
		return JobStatus{}, err
	}
	var st wire.JobStatus
	if err := j.sb.client.Do(ctx, wire.OpJobWait.Name, wire.JobRef{ID: j.ID}, &st); err != nil {
		return JobStatus{}, wrapErr(op, err)
	}
	return jobStatus(st), nil
}

// Kill stops the job and every process it started (SIGTERM, then SIGKILL
// after a short grace).
func (j *Job) Kill(ctx context.Context) error { return j.Signal(ctx, syscall.SIGTERM) }

// Signal sends sig to the job's process tree.
func (j *Job) Signal(ctx context.Context, sig syscall.Signal) error {
	const op = "Job.Signal"
	start := time.Now()
	err := j.sb.check(op)
	if err == nil {
		err = wrapErr(op, j.sb.client.Do(ctx, wire.OpJobKill.Name, wire.JobSignalRequest{ID: j.ID, Signal: int(sig)}, nil))
	}
	j.sb.auditEvent(ctx, op, j.ID+" "+sig.String(), start, err)
	return err
}

// Write sends data to the job's stdin (the job must have been started
// with Stdin or OpenStdin).
func (j *Job) Write(ctx context.Context, p []byte) error {
	const op = "Job.Write"
	if err := j.sb.check(op); err != nil {
		return err
	}
	for len(p) > 0 {
		n := min(len(p), 1<<20)
		if err := j.sb.client.Do(ctx, wire.OpJobStdin.Name, wire.JobStdinRequest{ID: j.ID, Data: p[:n]}, nil); err != nil {
			return wrapErr(op, err)
		}
		p = p[n:]
	}
	return nil
}

// CloseStdin closes the job's stdin.
func (j *Job) CloseStdin(ctx context.Context) error {
	const op = "Job.CloseStdin"
	if err := j.sb.check(op); err != nil {
		return err
	}
	return wrapErr(op, j.sb.client.Do(ctx, wire.OpJobStdin.Name, wire.JobStdinRequest{ID: j.ID, Close: true}, nil))
}
