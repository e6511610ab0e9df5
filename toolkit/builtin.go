package toolkit

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// BuiltinOption configures the built-in tools made by [ForSandbox].
type BuiltinOption func(*builtinConfig)

type builtinConfig struct {
	outputLimit int   // bytes of command, bash and Python output shown per stream
	readLimit   int   // bytes of a file read, a listing, a search shown
	savedLimit  int64 // bytes of one output kept in its workspace file
	outputDir   string
}

// DefaultShownOutput is how many bytes of one output stream (run_command, bash, background
// jobs, Python) a model is shown by default: the first and the last 8 KB around a marker that
// says what was left out and where the whole output is. 16 KB of typical command output is
// about 4,000 tokens by the toolkit's estimate (bytes/4; TestLongOutputHeadAndTail logs it):
// enough for a build's first error and its summary, little enough that a few long outputs do
// not crowd the context. Peers show 10–30 KB.
const DefaultShownOutput = 16 << 10

// DefaultSavedOutput caps the workspace file that keeps one command's whole output: 64 MiB.
const DefaultSavedOutput = 64 << 20

// OutputLimit sets how many bytes of each output stream (and of a file read, a listing, a
// search) the model is shown; default [DefaultShownOutput] for output and 30000 for reads.
// Cut output shows its start and its end; the whole output is saved to a workspace file whose
// path the marker gives.
func OutputLimit(bytes int) BuiltinOption {
	return func(c *builtinConfig) {
		if bytes > 0 {
			c.outputLimit = bytes
			c.readLimit = bytes
		}
	}
}

// SavedOutputLimit caps the workspace file that keeps one output whole (run_command, bash,
// background jobs); default [DefaultSavedOutput]. Past the cap the output is counted, not
// saved, and the marker says so.
func SavedOutputLimit(bytes int64) BuiltinOption {
	return func(c *builtinConfig) {
		if bytes > 0 {
			c.savedLimit = bytes
		}
	}
}

// OutputDir sets the workspace directory where command output is saved in full; default
// ".sandboxkit/outputs" (hidden, so listings stay clean).
func OutputDir(dir string) BuiltinOption { return func(c *builtinConfig) { c.outputDir = dir } }

// builtins is the state the built-in tools share: the sandbox, a read cursor per background
// job (so read_background_output returns only new output) and the counter naming saved
// outputs.
type builtins struct {
	sb      *sandbox.Sandbox
	cfg     builtinConfig
	mu      sync.Mutex
	cursors map[string]int64
	shells  map[string]string // bash session name -> shell id
	// bashFiles maps a shell id to the file of its last command's whole output, shown with
	// later results of the same command (input, wait).
	bashFiles map[string]string
	jobFiles  map[string]string // job id -> the file of its whole output
	saved     atomic.Int64
}

// errNoSandbox is returned when tools made with ForSandbox(nil) are called; it is fatal because
// no model input can fix it.
type errNoSandbox struct{}

func (errNoSandbox) Error() string { return "toolkit: built-in tools were made without a sandbox" }
func (errNoSandbox) Fatal() bool   { return true }

// ForSandbox returns the built-in tools over sb, in this order: run_command, start_background,
// read_background_output, stop_background, list_background, run_python, bash, read_file,
// write_file, edit_file, list_files, search_files, find_files, move_file, delete_file,
// set_permissions, sandbox_info.
// The names and main arguments are a public contract. Choose a subset with [Toolkit.Subset]
// and add your own tools with [Toolkit.Add].
//
// sb may be nil to get the definitions only (to generate schemas or list tools before a
// sandbox exists); calling such a tool returns a fatal Go error.
//
// Failures a model can fix (a missing file, a path outside the workspace) are IsError results
// whose text starts with the sandbox error code; a non-zero exit or a Python exception is data,
// not an error. A closed or dead sandbox is a Go error from Call. run_command on timeout is an
// IsError result that still carries the partial output, so the model cannot mistake it for a
// finished run.
func ForSandbox(sb *sandbox.Sandbox, opts ...BuiltinOption) *Toolkit {
	b := &builtins{sb: sb, cfg: builtinConfig{outputLimit: DefaultShownOutput, readLimit: 30000, savedLimit: DefaultSavedOutput, outputDir: ".sandboxkit/outputs"}, cursors: map[string]int64{}, shells: map[string]string{}, bashFiles: map[string]string{}, jobFiles: map[string]string{}}
	for _, o := range opts {
		o(&b.cfg)
	}
	tools := append(b.commandTools(), b.pythonTool(), b.bashTool())
	return Of(append(tools, b.fileTools()...)...)
}

// check fails fatally when there is no sandbox behind the tools.
func (b *builtins) check() error {
	if b.sb == nil {
		return errNoSandbox{}
	}
	return nil
}

// toolError shows the model a sandbox error as "CODE: message" without the Go operation name;
// it unwraps to the sandbox error so errors.Is and Fatal still work.
type toolError struct{ err *sandbox.Error }

func (e *toolError) Error() string { return string(e.err.Code) + ": " + e.err.Message }
func (e *toolError) Unwrap() error { return e.err }

func modelErr(err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) && !se.Fatal() {
		return &toolError{se}
	}
	return err
}

// textOut is the output of tools whose result is a sentence or a rendered block.
type textOut struct {
	Text string `json:"text"`
}

func (o textOut) ToolText() string { return o.Text }

// outputPath names the workspace file for the next saved output: the relative path to pass to
// the sandbox and the absolute one to show the model.
func (b *builtins) outputPath(stream string) (rel, abs string) {
	n := b.saved.Add(1)
	rel = path.Join(b.cfg.outputDir, fmt.Sprintf("%d-%s.txt", n, stream))
	if path.IsAbs(rel) {
		return rel, rel
	}
	return rel, path.Join(b.sb.Info().Workspace, rel)
}

// fit cuts a section to the shown size: its start and its end around the marker. Body is the
// output, or its start when Omitted already counts a middle left out earlier (by the sandbox)
// and Tail holds its end; what fit cuts more is added to Omitted, and to OmittedLines when
// linesKnown (the lines of the earlier omission were counted).
func (b *builtins) fit(s Section, linesKnown bool) Section {
	limit := b.cfg.outputLimit
	if s.Omitted == 0 && s.Tail == "" {
		s.Body, s.Tail, s.Omitted, s.OmittedLines = TruncateMiddle(s.Body, limit)
		return s
	}
	head, _ := Truncate(s.Body, limit/2)
	tail, _ := TruncateTail(s.Tail, limit-len(head))
	more := s.Body[len(head):] + s.Tail[:len(s.Tail)-len(tail)]
	s.Body, s.Tail = head, tail
	s.Omitted += len(more)
	if linesKnown {
		s.OmittedLines += strings.Count(more, "\n")
	} else {
		s.OmittedLines = 0
	}
	return s
}

// fileNote says what a saved output file lacks: its cap was reached, or writing it failed
// (after bytes were written, or before any).
func fileNote(cut, bytes int64, werr string) string {
	switch {
	case werr != "" && bytes == 0:
		return "the output could not be saved (" + werr + ")"
	case werr != "":
		return "writing it failed (" + werr + "), so it holds only the start"
	case cut > 0:
		return "it holds only the start: the last " + humanBytes(cut) + " were over the size cap of saved output"
	}
	return ""
}
func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

func statusText(st sandbox.JobStatus) string {
	switch {
	case st.Running:
		return "running (pid " + strconv.Itoa(st.PID) + ")"
	case st.Signal != "":
		return "killed by " + st.Signal
	}
	return "exited with code " + strconv.Itoa(st.ExitCode)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
