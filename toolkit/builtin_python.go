package toolkit

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

type pythonIn struct {
	Code           string `json:"code"`
	ContextID      string `json:"context_id,omitempty" description:"separate namespace, default \"default\""`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" description:"default 60"`
}

type pythonOut struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	text   string
	images []Image
}

func (o pythonOut) ToolText() string    { return o.text }
func (o pythonOut) ToolImages() []Image { return o.images }

func (b *builtins) pythonTool() *Tool {
	return New("run_python", "Run Python in a persistent kernel: variables and imports stay between calls (like a notebook). The last expression's value is shown; plots come back as images. On timeout the code is interrupted and state kept.", b.runPython)
}

// An exception in the code is data for the model (like a non-zero exit), not an IsError result.
func (b *builtins) runPython(ctx context.Context, in pythonIn) (pythonOut, error) {
	if err := b.check(); err != nil {
		return pythonOut{}, err
	}
	if in.TimeoutSeconds < 0 {
		return pythonOut{}, fmt.Errorf("timeout_seconds must be positive, got %d", in.TimeoutSeconds)
	}
	ex, err := b.sb.Python.Run(ctx, in.Code, sandbox.PythonRunOptions{Context: in.ContextID, Timeout: seconds(in.TimeoutSeconds)})
	if err != nil && ex == nil {
		return pythonOut{}, modelErr(err)
	}
	out := pythonOut{Stdout: ex.Stdout, Stderr: ex.Stderr}
	sections := []Section{b.section(ctx, "stdout", ex.Stdout, false), b.section(ctx, "stderr", ex.Stderr, true)}
	for _, o := range ex.Outputs {
		for _, mime := range []string{"image/png", "image/jpeg"} {
			if d, ok := o.Data[mime]; ok {
				out.images = append(out.images, Image{MIMEType: mime, Data: d})
			}
		}
	}
	if ex.Result != nil {
		out.Result = ex.Result.Plain()
		body, omitted := Truncate(out.Result, b.cfg.outputLimit)
		sections = append(sections, Section{Name: "result", Body: body, Omitted: omitted})
	}
	if ex.Error != nil {
		out.Error = ex.Error.Error()
		body, omitted := TruncateTail(strings.Join(ex.Error.Traceback, "\n"), b.cfg.outputLimit)
		sections = append(sections, Section{Name: "error", Body: body + "\n" + out.Error, Omitted: omitted, KeptTail: true})
	}
	fields := []Field{{Name: "execution", Value: strconv.Itoa(ex.Count)}}
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
