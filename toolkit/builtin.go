package toolkit

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// BuiltinOption configures the built-in tools made by [ForSandbox].
type BuiltinOption func(*builtinConfig)

type builtinConfig struct {
	outputLimit int
	outputDir   string
}

// OutputLimit sets how many bytes of each output stream (and of a file read, a listing, a
// search) the model is shown; default 30000. Cut command output is saved whole to a file whose
// path the truncation marker gives.
func OutputLimit(bytes int) BuiltinOption {
	return func(c *builtinConfig) {
		if bytes > 0 {
			c.outputLimit = bytes
		}
	}
}

// OutputDir sets the workspace directory where cut command output is saved in full; default
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
	saved   atomic.Int64
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
	b := &builtins{sb: sb, cfg: builtinConfig{outputLimit: 30000, outputDir: ".sandboxkit/outputs"}, cursors: map[string]int64{}, shells: map[string]string{}}
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

// save writes a cut output whole into the workspace and returns the path for the marker, or ""
// when it could not be saved (the marker then just counts the bytes).
func (b *builtins) save(ctx context.Context, stream, data string) string {
	n := b.saved.Add(1)
	rel := path.Join(b.cfg.outputDir, fmt.Sprintf("%d-%s.txt", n, stream))
	if err := b.sb.Files.Write(ctx, rel, []byte(data), 0); err != nil {
		return ""
	}
	if path.IsAbs(rel) {
		return rel
	}
	return path.Join(b.sb.Info().Workspace, rel)
}

// section cuts one output stream for the model: stdout keeps its start, stderr its end (where a
// failing command prints why).
func (b *builtins) section(ctx context.Context, name, data string, tail bool) Section {
	if len(data) <= b.cfg.outputLimit {
		return Section{Name: name, Body: data}
	}
	s := Section{Name: name, KeptTail: tail}
	if tail {
		s.Body, s.Omitted = TruncateTail(data, b.cfg.outputLimit)
	} else {
		s.Body, s.Omitted = Truncate(data, b.cfg.outputLimit)
	}
	s.FullPath = b.save(ctx, name, data)
	return s
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
