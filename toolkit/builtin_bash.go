package toolkit

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

type bashIn struct {
	Command        string `json:"command,omitempty"`
	SessionID      string `json:"session_id,omitempty" description:"any name; default \"default\""`
	Input          string `json:"input,omitempty" description:"text or keys (C-c, Enter) for a running command"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" description:"wait this long, default 60"`
}

func (b *builtins) bashTool() *Tool {
	return New("bash", "Run a command in a persistent bash session: cd, variables and functions stay between calls. A command still running at the timeout keeps running: send input, or call with neither command nor input to wait.", b.bash)
}

// session returns the shell behind a model-chosen session name, opening it on first use.
func (b *builtins) session(ctx context.Context, name string) (*sandbox.Shell, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id, ok := b.shells[name]; ok {
		if sh, err := b.sb.Shells.Get(id); err == nil {
			return sh, nil
		}
	}
	sh, err := b.sb.Shells.Open(ctx, sandbox.ShellOptions{})
	if err != nil {
		return nil, err
	}
	b.shells[name] = sh.ID()
	return sh, nil
}

func (b *builtins) bash(ctx context.Context, in bashIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	if in.Command != "" && in.Input != "" {
		return textOut{}, fmt.Errorf("give command or input, not both")
	}
	if in.TimeoutSeconds < 0 {
		return textOut{}, fmt.Errorf("timeout_seconds must be positive, got %d", in.TimeoutSeconds)
	}
	name := in.SessionID
	if name == "" {
		name = "default"
	}
	sh, err := b.session(ctx, name)
	if err != nil {
		return textOut{}, modelErr(err)
	}
	var res sandbox.ShellResult
	switch {
	case in.Command != "":
		res, err = sh.Run(ctx, in.Command, sandbox.ShellRunOptions{Timeout: seconds(in.TimeoutSeconds)})
	case in.Input != "":
		res, err = sh.Input(ctx, in.Input, seconds(in.TimeoutSeconds))
	default:
		res, err = sh.Wait(ctx, seconds(in.TimeoutSeconds))
	}
	if err != nil {
		return textOut{}, modelErr(err)
	}
	fields := []Field{{Name: "session", Value: name}}
	switch {
	case res.Ended:
		fields = append(fields, Field{Name: "ended", Value: res.EndReason + "; the next call opens a new session"})
	case res.Running:
		fields = append(fields, Field{Name: "still running", Value: "send input (text or keys like C-c), or call again to wait"})
	case res.ExitCode != nil:
		fields = append(fields, Field{Name: "exit code", Value: strconv.Itoa(*res.ExitCode)})
	}
	fields = append(fields, Field{Name: "cwd", Value: res.Cwd})
	return textOut{Render(fields, b.section(ctx, "output", res.Output, false))}, nil
}
