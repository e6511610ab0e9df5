package pykernel

import (
	"fmt"
	"strings"
	"time"
)

// OutputKind says what an Output is.
type OutputKind string

// The kinds of Output.
const (
	// Stdout is a chunk of standard output (Output.Text), streamed as written.
	Stdout OutputKind = "stdout"
	// Stderr is a chunk of standard error (Output.Text), streamed as written.
	Stderr OutputKind = "stderr"
	// Display is rich output from display(obj) or a matplotlib figure (Output.Data).
	Display OutputKind = "display"
	// Result is the value of the code's final expression (Output.Data).
	Result OutputKind = "result"
	// Omitted marks where the middle of a long stream was left out
	// (Output.Omission says which stream and how much); the stream's text
	// after it is its end. It appears in Execution.Timeline and OnOutput.
	Omitted OutputKind = "omitted"
)

// Omission is what an Omitted output left out.
type Omission struct {
	Stream OutputKind // Stdout or Stderr
	Bytes  int64      // bytes left out
	Lines  int64      // newlines among them
}

// Common MIME types in Output.Data.
const (
	MIMEText     = "text/plain"
	MIMEHTML     = "text/html"
	MIMEMarkdown = "text/markdown"
	MIMELaTeX    = "text/latex"
	MIMEJSON     = "application/json"
	MIMEPNG      = "image/png"
	MIMEJPEG     = "image/jpeg"
	MIMESVG      = "image/svg+xml"
)

// Output is one piece of what a run produced: a stream chunk or a MIME bundle.
type Output struct {
	Kind OutputKind
	// Text is the chunk of a Stdout or Stderr output.
	Text string
	// Data maps MIME type to content for Display and Result outputs. It
	// always holds text/plain (the repr). Images (image/png, image/jpeg) are
	// raw bytes, not base64; application/json is JSON text; the others are
	// UTF-8 text.
	Data map[string][]byte
	// Omission is set for an Omitted output.
	Omission *Omission
}

// Plain returns the text/plain form of a Display or Result output, or the
// Text of a stream chunk.
func (o Output) Plain() string {
	if o.Kind == Stdout || o.Kind == Stderr {
		return o.Text
	}
	return string(o.Data[MIMEText])
}

// ExecError is an exception raised by the user's code (or by the repr of its
// result). It is data about the code, not a failure of the kernel.
type ExecError struct {
	// Name is the exception class name, e.g. "ZeroDivisionError".
	Name string
	// Value is str() of the exception, e.g. "division by zero".
	Value string
	// Traceback is the traceback as Python prints it, one line per element,
	// showing only the user's own frames (cells are named "<cell N>"). For a
	// SyntaxError it holds the offending line and the caret.
	Traceback []string
}

// Error formats the exception the way Python's last traceback line does.
func (e *ExecError) Error() string {
	if e.Value == "" {
		return e.Name
	}
	return e.Name + ": " + e.Value
}

// Execution is the outcome of one Run.
//
// When the code calls sys.exit(), exit() or raises SystemExit, the context
// survives: Error is set with Name "SystemExit" and Value the exit argument
// as str() shows it ("" for sys.exit(), "3" for sys.exit(3)), and Exited is
// true. A timeout or cancellation interrupts the code with KeyboardInterrupt:
// Error then is that KeyboardInterrupt (its traceback shows where the code
// was) and TimedOut or Interrupted is set. If the code did not stop within
// the grace period, the process was killed and a fresh one started: StateLost
// is true and every variable, import and file handle of the context is gone.
type Execution struct {
	// Count is this run's execution count in the context: 1, 2, 3, ...
	Count int
	// Stdout and Stderr are everything written to fds 1 and 2 during the run,
	// by Python code and by child processes, cut at the output limit.
	Stdout, Stderr string
	// Result is the value of a final expression statement; nil when the code
	// ends in a statement, in an expression followed by ';', or in None.
	Result *Output
	// Outputs are the Display outputs in the order they were produced.
	Outputs []Output
	// Timeline is everything the run produced in the order it was
	// produced: stream text (consecutive chunks of one stream merged),
	// displays, the result, the kernel's notices and truncation markers,
	// as Jupyter shows a cell's output. It holds what Stdout, Stderr,
	// Outputs and Result hold, interleaved.
	Timeline []Output
	// Error is the exception the code raised, or nil.
	Error *ExecError
	// Exited is set when the code raised SystemExit (see above).
	Exited bool
	// TimedOut is set when RunOptions.Timeout expired and the code was interrupted.
	TimedOut bool
	// Interrupted is set when the caller's context was cancelled during the run.
	Interrupted bool
	// StateLost is set when the Python process was killed (the code ignored
	// the interrupt, or the process died) and the context now runs in a fresh
	// process with no state (or, when the Proc did not report the end of
	// the killed process, will on its next run).
	StateLost bool
	// DroppedBytes counts output bytes cut beyond Options.MaxOutputBytes:
	// a stream keeps its start and its end, and a marker line where its
	// middle was left out says how much (the Timeline has an Omitted
	// output there). DroppedLines counts the newlines among them.
	DroppedBytes int64
	DroppedLines int64
	// OutputFile is RunOptions.OutputFile when one was asked for: the file
	// holds OutputFileBytes bytes of the run's output (both streams, in the
	// order written); OutputFileCut bytes were past RunOptions.OutputFileLimit
	// or after a failed write, and OutputFileError says why a write failed.
	OutputFile      string
	OutputFileBytes int64
	OutputFileCut   int64
	OutputFileError string
	// DroppedOutputs counts Display outputs (or a Result) dropped beyond
	// Options.MaxDisplayBytes.
	DroppedOutputs int
	// Duration is the wall time of the run as seen from Go.
	Duration time.Duration
}

// OK reports whether the code ran to the end without an exception, a
// timeout or a lost state.
func (e *Execution) OK() bool {
	return e.Error == nil && !e.TimedOut && !e.Interrupted && !e.StateLost
}

// truncationMarker is appended to a stream that was cut at its end (the
// driver did not keep the budget).
func truncationMarker(dropped int64, limit int) string {
	return fmt.Sprintf("\n[sandboxkit: output truncated, %d bytes dropped (limit %d bytes per run); "+
		"write large output to a file and read parts of it]\n", dropped, limit)
}

// omissionMarker stands in the stream where its middle was left out.
func omissionMarker(o Omission, limit int) string {
	return fmt.Sprintf("\n[sandboxkit: %d lines (%d bytes) left out here; the start and the end of the output are kept (limit %d bytes per run)]\n", o.Lines, o.Bytes, limit)
}

// streamBuf collects one stream up to a shared byte budget.
type streamBuf struct {
	b       strings.Builder
	dropped int64
}
