package toolkit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

type runCommandIn struct {
	Command        string `json:"command" description:"shell command line (sh -c)"`
	Cwd            string `json:"cwd,omitempty" description:"working directory in the workspace"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" description:"default: the sandbox's (sandbox_info)"`
}

type commandOut struct {
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	StdoutFile string `json:"stdout_file,omitempty"`
	StderrFile string `json:"stderr_file,omitempty"`
	// OutputFile holds the whole output (stdout and stderr interleaved) when some of it was not
	// shown.
	OutputFile string `json:"output_file,omitempty"`
	text       string
}

func (o commandOut) ToolText() string { return o.text }

type jobIn struct {
	JobID string `json:"job_id" description:"id from start_background"`
}

type readJobIn struct {
	JobID     string `json:"job_id" description:"id from start_background"`
	FromStart bool   `json:"from_start,omitempty" description:"re-read all kept output"`
}

type startIn struct {
	Command string `json:"command" description:"shell command line (sh -c)"`
	Cwd     string `json:"cwd,omitempty" description:"working directory in the workspace"`
}

func (b *builtins) commandTools() []*Tool {
	return []*Tool{
		New("run_command", "Run a shell command in a fresh process and wait for it; no state (cd, variables) carries over to the next call. Shows exit code, stdout, stderr; of long output the start and the end are shown, and the whole output is saved to a file named in the marker. Killed at timeout_seconds; use start_background for servers and long jobs. Put temporary files in $TMPDIR or the workspace.", b.runCommand),
		New("start_background", "Start a long-running command (server, watcher, long build) in the background and return its job_id at once.", b.startBackground),
		New("read_background_output", "Read a background job's status and the output it printed since the last read.", b.readBackground, ReadOnly()),
		New("stop_background", "Stop a background job and every process it started.", b.stopBackground),
		New("list_background", "List background jobs with their status.", b.listBackground, ReadOnly()),
	}
}

func (b *builtins) runCommand(ctx context.Context, in runCommandIn) (commandOut, error) {
	if err := b.check(); err != nil {
		return commandOut{}, err
	}
	if in.TimeoutSeconds < 0 {
		return commandOut{}, fmt.Errorf("timeout_seconds must be positive, got %d", in.TimeoutSeconds)
	}
	// The agent writes the whole output to the file as it is produced; the result keeps only
	// its head and tail. The file is removed again when everything was shown.
	rel, abs := b.outputPath("output")
	res, err := b.sb.Commands.Run(ctx, sandbox.Command{Shell: in.Command, Dir: in.Cwd, Timeout: seconds(in.TimeoutSeconds),
		OutputFile: rel, OutputFileLimit: b.cfg.savedLimit})
	timedOut := errors.Is(err, sandbox.ErrTimeout) && res != nil && res.TimedOut
	if err != nil && !timedOut {
		return commandOut{}, modelErr(err)
	}
	out := commandOut{ExitCode: res.ExitCode, Signal: res.Signal, Stdout: res.Stdout, Stderr: res.Stderr}
	so := b.streamSection("stdout", res.Stdout, res.StdoutDropped)
	se := b.streamSection("stderr", res.Stderr, res.StderrDropped)
	if so.Omitted > 0 || se.Omitted > 0 {
		b.pointAtFile(ctx, &so, &se, res.OutputFileInfo, abs, res.Stderr == "")
		out.StdoutFile, out.StderrFile = so.FullPath, se.FullPath
		if so.FullPath != "" || se.FullPath != "" {
			out.OutputFile = abs
		}
	} else if res.OutputFile != "" {
		_ = b.sb.Files.Remove(ctx, rel, sandbox.RemoveOptions{}) // everything was shown
	}
	fields := []Field{{Name: "exit code", Value: strconv.Itoa(res.ExitCode)}, {Name: "signal", Value: res.Signal}}
	if timedOut {
		fields = []Field{{Name: "timed out", Value: fmt.Sprintf("after %s; %s. Raise timeout_seconds or use start_background", res.Duration.Round(time.Second), killedText(res))}}
		// An IsError result: the command did not finish, so the model must not take the
		// partial output for the answer.
		return commandOut{}, errors.New(Render(fields, so, se))
	}
	out.text = Render(fields, so, se)
	return out, nil
}

// killedText says what the timeout's kill did, and only that: the sandbox
// reports how many processes besides the command it killed and which survived.
func killedText(res *sandbox.Result) string {
	s := "the command was killed"
	switch res.Killed {
	case 0:
	case 1:
		s += ", with 1 other process it had started"
	default:
		s += fmt.Sprintf(", with the %d other processes it had started", res.Killed)
	}
	if n := len(res.Survivors); n > 0 {
		s += fmt.Sprintf("; %d of its processes could not be killed and run on (pids %v)", n, res.Survivors)
	}
	return s
}

// streamSection cuts one stream of a command's result for the model: its start and its end
// within the shown size. dropped is what the sandbox already cut from the middle (the result
// holds its head and tail around a marker of the sandbox's, which is replaced by ours).
func (b *builtins) streamSection(name, text string, dropped int64) Section {
	s := Section{Name: name, Body: text}
	if dropped > 0 {
		s.Body, s.Tail = splitSandboxCut(text, name, dropped)
		s.Omitted = int(dropped)
	}
	// The lines of the sandbox's cut are not known here (pointAtFile counts them from the file).
	return b.fit(s, dropped == 0)
}

// splitSandboxCut splits a stream the sandbox cut into the head before its marker and the tail
// after it. When the marker cannot be found the text is returned whole as the head.
func splitSandboxCut(text, stream string, dropped int64) (head, tail string) {
	marker := fmt.Sprintf("\n[... sandboxkit: %d bytes of %s cut here", dropped, stream)
	i := strings.Index(text, marker)
	if i < 0 {
		return text, ""
	}
	end := strings.IndexByte(text[i+1:], '\n')
	if end < 0 {
		return text[:i], ""
	}
	return text[:i] + "\n", text[i+1+end+1:]
}

// pointAtFile completes the markers of cut sections with the file that holds the whole output,
// said honestly when the file was cut or failed, and with the count of omitted lines when it
// can be known (the file is complete and holds one stream: stdoutOnly).
func (b *builtins) pointAtFile(ctx context.Context, so, se *Section, f sandbox.OutputFileInfo, abs string, stdoutOnly bool) {
	note := fileNote(f.OutputFileCut, f.OutputFileBytes, f.OutputFileError)
	for _, s := range []*Section{so, se} {
		if s.Omitted == 0 {
			continue
		}
		s.FileNote = note
		if f.OutputFile != "" && (f.OutputFileBytes > 0 || note == "") {
			s.FullPath = abs
		}
	}
	if so.Omitted > 0 && stdoutOnly && note == "" && f.OutputFile != "" && so.OmittedLines == 0 {
		if total, ok := b.countLines(ctx, f.OutputFile); ok {
			so.OmittedLines = total - strings.Count(so.Body, "\n") - strings.Count(so.Tail, "\n")
		}
	}
}

// countLines counts the newlines of a workspace file with wc, outside the caller's output.
func (b *builtins) countLines(ctx context.Context, file string) (int, bool) {
	r, err := b.sb.Commands.Run(ctx, sandbox.Command{Args: []string{"wc", "-l", file}, Timeout: 30 * time.Second})
	if err != nil || r.ExitCode != 0 {
		return 0, false
	}
	f := strings.Fields(r.Stdout)
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	return n, err == nil
}

func (b *builtins) startBackground(ctx context.Context, in startIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	// The agent keeps the job's whole output in the file; its ring buffer, which
	// read_background_output reads, keeps only the recent part.
	rel, abs := b.outputPath("job")
	j, err := b.sb.Commands.Start(ctx, sandbox.Command{Shell: in.Command, Dir: in.Cwd, OutputFile: rel, OutputFileLimit: b.cfg.savedLimit})
	if err != nil {
		return textOut{}, modelErr(err)
	}
	b.mu.Lock()
	b.jobFiles[j.ID] = abs
	b.mu.Unlock()
	return textOut{fmt.Sprintf("started job %s; read its output with read_background_output, stop it with stop_background; its whole output is kept in %s", j.ID, abs)}, nil
}

func (b *builtins) readBackground(ctx context.Context, in readJobIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	b.mu.Lock()
	since := b.cursors[in.JobID]
	file := b.jobFiles[in.JobID]
	b.mu.Unlock()
	if in.FromStart {
		since = 0
	}
	o, err := b.sb.Commands.Job(in.JobID).Output(ctx, since)
	if err != nil {
		return textOut{}, modelErr(err)
	}
	b.mu.Lock()
	b.cursors[in.JobID] = o.Next
	b.mu.Unlock()
	s := Section{Name: "output"}
	s.Body, s.Tail, s.Omitted, s.OmittedLines = TruncateMiddle(o.Data, b.cfg.outputLimit)
	if o.Dropped > 0 {
		// Bytes the ring buffer no longer held: their lines are not known here.
		s.Omitted += int(o.Dropped)
		s.OmittedLines = 0
	}
	if s.Omitted > 0 {
		s.FileNote = fileNote(o.Status.OutputFileCut, o.Status.OutputFileBytes, o.Status.OutputFileError)
		if file != "" && (o.Status.OutputFileBytes > 0 || s.FileNote == "") {
			s.FullPath = file
		}
	}
	fields := []Field{{Name: in.JobID, Value: statusText(o.Status)}}
	if o.Data == "" && o.Dropped == 0 {
		return textOut{Render(fields) + "\n(no new output)"}, nil
	}
	return textOut{Render(fields, s)}, nil
}

func (b *builtins) stopBackground(ctx context.Context, in jobIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	j := b.sb.Commands.Job(in.JobID)
	st, err := j.Status(ctx)
	if err != nil {
		return textOut{}, modelErr(err)
	}
	if st.Running {
		if err := j.Kill(ctx); err != nil {
			return textOut{}, modelErr(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st2, werr := j.Wait(wctx)
		cancel()
		if werr == nil {
			st = st2
		} else if ctx.Err() != nil {
			return textOut{}, ctx.Err()
		}
	}
	return textOut{in.JobID + ": " + statusText(st)}, nil
}

func (b *builtins) listBackground(ctx context.Context, _ struct{}) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	jobs, err := b.sb.Commands.Jobs(ctx)
	if err != nil {
		return textOut{}, modelErr(err)
	}
	if len(jobs) == 0 {
		return textOut{"no background jobs"}, nil
	}
	var sb strings.Builder
	for _, st := range jobs {
		b.mu.Lock()
		unread := st.Written - b.cursors[st.ID]
		b.mu.Unlock()
		fmt.Fprintf(&sb, "%s  %s  %d unread bytes  %s\n", st.ID, statusText(st), unread, commandLine(st.Args))
	}
	return textOut{strings.TrimSuffix(sb.String(), "\n")}, nil
}

func commandLine(args []string) string {
	if len(args) == 3 && args[0] == "/bin/sh" && args[1] == "-c" {
		return args[2]
	}
	return strings.Join(args, " ")
}
