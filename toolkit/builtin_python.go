package toolkit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/pykernel"
)

type pythonIn struct {
	Code           string `json:"code" description:"Python source; the last expression's value is shown"`
	ContextID      string `json:"context_id,omitempty" description:"namespace to run in; a new name creates a fresh one; default \"default\""`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" description:"default: the sandbox's (sandbox_info)"`
}

type pythonOut struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	// Created is set when this call created the context.
	Created bool `json:"created,omitempty"`
	text    string
	images  []Image
}

func (o pythonOut) ToolText() string    { return o.text }
func (o pythonOut) ToolImages() []Image { return o.images }

func (b *builtins) pythonTool() *Tool {
	return New("run_python", "Run Python in a persistent kernel: variables and imports stay between calls (like a notebook). Prints, display() outputs and the last expression's value are shown in order; plots come back as images. On timeout the code is interrupted and state kept.", b.runPython)
}

// context returns the context to run in, creating a named one the model has not used yet, and
// whether it was created now. Only "default" is created implicitly by the sandbox; a model that
// picks a new context_id means a fresh namespace, so it gets one instead of a not-found error.
func (b *builtins) context(ctx context.Context, name string) (bool, error) {
	if name == "" || name == pykernel.DefaultContext {
		return false, nil
	}
	cs, _ := b.sb.Python.List(ctx) // Create below reports a closed sandbox
	for _, c := range cs {
		if c.Name == name {
			return false, nil
		}
	}
	err := b.sb.Python.Create(ctx, name)
	switch {
	case err == nil:
		return true, nil
	case sandbox.CodeOf(err) == sandbox.CodeExists:
		return false, nil // a concurrent call made it
	case errors.Is(err, pykernel.ErrTooManyContexts):
		var names []string
		cs, _ := b.sb.Python.List(ctx)
		for _, c := range cs {
			names = append(names, c.Name)
		}
		return false, fmt.Errorf("context_id %q cannot be created: all %d contexts are in use (%s); pass one of them as context_id", name, sandbox.MaxPythonContexts, strings.Join(names, ", "))
	case errors.Is(err, pykernel.ErrBadName):
		return false, fmt.Errorf("context_id %q is not a valid name: use 1 to 64 letters, digits, '_', '-' or '.'", shortName(name))
	}
	return false, modelErr(err)
}

// An exception in the code is data for the model (like a non-zero exit), not an IsError result.
func (b *builtins) runPython(ctx context.Context, in pythonIn) (pythonOut, error) {
	if err := b.check(); err != nil {
		return pythonOut{}, err
	}
	if in.TimeoutSeconds < 0 {
		return pythonOut{}, fmt.Errorf("timeout_seconds must be positive, got %d", in.TimeoutSeconds)
	}
	created, err := b.context(ctx, in.ContextID)
	if err != nil {
		return pythonOut{}, err
	}
	// The kernel keeps the run's whole output in the file as it is produced; the Execution
	// keeps each stream's start and end. The file is removed again when everything was shown.
	rel, abs := b.outputPath("python")
	ex, err := b.sb.Python.Run(ctx, in.Code, sandbox.PythonRunOptions{Context: in.ContextID, Timeout: seconds(in.TimeoutSeconds),
		OutputFile: rel, OutputFileLimit: b.cfg.savedLimit})
	if err != nil && ex == nil {
		return pythonOut{}, modelErr(err)
	}
	out := pythonOut{Stdout: ex.Stdout, Stderr: ex.Stderr, Created: created}
	// The sections follow the timeline, as a notebook shows a cell's outputs: a display between
	// two prints stays between them, and the result comes where it came. A stream whose middle
	// the kernel left out gets its end (sent last) as the tail of its section.
	var sections []Section
	tailOf := map[string]int{} // stream -> index of the section waiting for its tail
	for _, o := range ex.Timeline {
		switch o.Kind {
		case sandbox.PythonStdout, sandbox.PythonStderr:
			if i, ok := tailOf[string(o.Kind)]; ok {
				sections[i].Tail += o.Text
				continue
			}
			sections = append(sections, Section{Name: string(o.Kind), Body: o.Text})
		case sandbox.PythonOmitted:
			name := string(o.Omission.Stream)
			i := len(sections) - 1
			for i >= 0 && sections[i].Name != name {
				i--
			}
			if i < 0 {
				sections = append(sections, Section{Name: name})
				i = len(sections) - 1
			}
			sections[i].Omitted += int(o.Omission.Bytes)
			sections[i].OmittedLines += int(o.Omission.Lines)
			tailOf[name] = i
		case sandbox.PythonDisplay, sandbox.PythonResult:
			image := false
			for _, mime := range []string{"image/png", "image/jpeg"} {
				if d, ok := o.Data[mime]; ok {
					out.images = append(out.images, Image{MIMEType: mime, Data: d})
					image = true
				}
			}
			name := "display"
			if o.Kind == sandbox.PythonResult {
				name = "result"
				out.Result = o.Plain()
			} else if image {
				continue // the picture itself follows the text; its repr ("<Figure ...>") says nothing
			}
			sections = append(sections, Section{Name: name, Body: o.Plain()})
		}
	}
	cut := false
	for i := range sections {
		sections[i] = b.fit(sections[i], true)
		cut = cut || sections[i].Omitted > 0
	}
	if cut {
		note := fileNote(ex.OutputFileCut, ex.OutputFileBytes, ex.OutputFileError)
		for i := range sections {
			if sections[i].Omitted > 0 {
				sections[i].FileNote = note
				if ex.OutputFile != "" && (ex.OutputFileBytes > 0 || note == "") {
					sections[i].FullPath = abs
				}
			}
		}
	} else if ex.OutputFile != "" {
		_ = b.sb.Files.Remove(ctx, rel, sandbox.RemoveOptions{}) // everything was shown
	}
	if ex.Error != nil {
		out.Error = ex.Error.Error()
		body, omitted := TruncateTail(strings.Join(ex.Error.Traceback, "\n"), b.cfg.outputLimit)
		sections = append(sections, Section{Name: "error", Body: body + "\n" + out.Error, Omitted: omitted, KeptTail: true})
	}
	fields := []Field{{Name: "execution", Value: strconv.Itoa(ex.Count)}}
	if created {
		fields = append(fields, Field{Name: "context", Value: in.ContextID + " (new: created by this call, empty before it)"})
	} else if in.ContextID != "" && in.ContextID != pykernel.DefaultContext {
		fields = append(fields, Field{Name: "context", Value: in.ContextID})
	}
	if ex.TimedOut {
		fields = append(fields, Field{Name: "timed out", Value: "the code was interrupted; raise timeout_seconds"})
	}
	if ex.StateLost {
		fields = append(fields, Field{Name: "state lost", Value: "the kernel was restarted; variables and imports are gone"})
	}
	if len(out.images) > 0 {
		fields = append(fields, Field{Name: "images", Value: strconv.Itoa(len(out.images))})
	}
	out.text = Render(fields, sections...)
	return out, nil
}
