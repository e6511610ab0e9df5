package openaitools_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

func TestMain(m *testing.M) {
	// The local backend's launcher thread lives as long as the process by design.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/sandboxkit/sandboxkit/sandbox/local/isolate.OnLauncherThread.func1.1"))
}

type addIn struct {
	A int `json:"a" description:"first addend"`
	B int `json:"b" description:"second addend"`
}

type sumOut struct {
	Sum int `json:"sum"`
}

func (s sumOut) ToolText() string { return fmt.Sprintf("sum: %d", s.Sum) }

// addTool is a real read-only tool.
func addTool() *toolkit.Tool {
	return toolkit.New("add", "Add two integers.", func(ctx context.Context, in addIn) (sumOut, error) {
		return sumOut{Sum: in.A + in.B}, nil
	}, toolkit.ReadOnly())
}

type writeIn struct {
	Path    string `json:"path" description:"file name inside the notes directory"`
	Content string `json:"content" description:"text to write"`
}

type writeOut struct {
	Bytes int `json:"bytes"`
}

func (w writeOut) ToolText() string { return fmt.Sprintf("wrote %d bytes", w.Bytes) }

// writeTool writes real files below dir, confined with os.Root.
func writeTool(dir string) *toolkit.Tool {
	return toolkit.New("write_note", "Write a text file.", func(ctx context.Context, in writeIn) (writeOut, error) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return writeOut{}, err
		}
		defer root.Close()
		if err := root.WriteFile(in.Path, []byte(in.Content), 0o644); err != nil {
			return writeOut{}, err
		}
		return writeOut{Bytes: len(in.Content)}, nil
	})
}

func readNote(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("note %s: %v", name, err)
	}
	return string(b)
}

type tagsIn struct {
	Tags map[string]string `json:"tags" description:"free-form labels"`
}

// tagTool has a map argument, which strict mode cannot express.
func tagTool() *toolkit.Tool {
	return toolkit.New("tag", "Count labels.", func(ctx context.Context, in tagsIn) (sumOut, error) {
		return sumOut{Sum: len(in.Tags)}, nil
	}, toolkit.ReadOnly())
}

type plotIn struct {
	Title string `json:"title"`
}

type plotOut struct {
	png []byte
}

func (p plotOut) ToolText() string { return "plotted" }
func (p plotOut) ToolImages() []toolkit.Image {
	return []toolkit.Image{{MIMEType: "image/png", Data: p.png}}
}

// plotTool returns an image, the way run_python returns a matplotlib figure.
func plotTool() *toolkit.Tool {
	return toolkit.New("plot", "Draw a plot.", func(ctx context.Context, in plotIn) (plotOut, error) {
		return plotOut{png: []byte("\x89PNG " + in.Title)}, nil
	}, toolkit.ReadOnly())
}

// deadSandbox is an infrastructure failure: toolkit turns it into a Go error.
type deadSandbox struct{}

func (deadSandbox) Error() string { return "sandbox is dead" }
func (deadSandbox) Fatal() bool   { return true }

type emptyIn struct{}

func deadTool() *toolkit.Tool {
	return toolkit.New("crash", "Always loses the sandbox.", func(ctx context.Context, in emptyIn) (sumOut, error) {
		return sumOut{}, deadSandbox{}
	}, toolkit.ReadOnly())
}
