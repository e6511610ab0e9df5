package toolkit

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

type bashIn struct {
	Command        string `json:"command,omitempty" description:"bash command line to run in the session"`
	SessionID      string `json:"session_id,omitempty" description:"any name; a new name opens a new session; default \"default\""`
	Input          string `json:"input,omitempty" description:"text or keys (C-c, Enter) for a running command"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" description:"wait this long; default: the sandbox's (sandbox_info)"`
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
	// The session keeps the head and the tail of each result within the shown size.
	sh, err := b.sb.Shells.Open(ctx, sandbox.ShellOptions{MaxOutputBytes: b.cfg.outputLimit})
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
		// The session keeps the command's whole output in the file as it is produced (also
		// while it runs on after this call); the result holds its head and tail.
		rel, abs := b.outputPath("output")
		b.mu.Lock()
		b.bashFiles[sh.ID()] = abs
		b.mu.Unlock()
		res, err = sh.Run(ctx, in.Command, sandbox.ShellRunOptions{Timeout: seconds(in.TimeoutSeconds),
			OutputFile: rel, OutputFileLimit: b.cfg.savedLimit})
	case in.Input != "":
		res, err = sh.Input(ctx, in.Input, sandbox.ShellWaitOptions{Timeout: seconds(in.TimeoutSeconds)})
	default:
		res, err = sh.Wait(ctx, sandbox.ShellWaitOptions{Timeout: seconds(in.TimeoutSeconds)})
	}
	switch {
	case err == nil:
	case sandbox.CodeOf(err) == sandbox.CodeBusy:
		// The session's message names its Go methods (Input, Wait); say it with bash's arguments.
		return textOut{}, fmt.Errorf("SBX_BUSY: a command is still running in session %q: send input (text, or keys like C-c to interrupt it), call bash with neither command nor input to wait for it, or use another session_id", name)
	case sandbox.CodeOf(err) == sandbox.CodeInvalidArgument:
		if in.Input != "" && !sh.Info().Running {
			return textOut{}, fmt.Errorf("no command is running in session %q, so there is nothing to send input to: run one with command", name)
		}
		return textOut{}, modelErr(err)
	default:
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
	return textOut{Render(fields, b.shellSection(ctx, sh, res, in.Command != ""))}, nil
}

// shellSection shows a session's output: the session already kept the head and the tail within
// the shown size (its result's marker is replaced by ours), and the file of the command's whole
// output is named when something was left out.
// ran says res is the result of the call that ran the command (not of input or a wait).
func (b *builtins) shellSection(ctx context.Context, sh *sandbox.Shell, res sandbox.ShellResult, ran bool) Section {
	s := Section{Name: "output", Body: res.Output}
	if !res.Truncated {
		if ran && res.OutputFile != "" && !res.Running {
			_ = b.sb.Files.Remove(ctx, res.OutputFile, sandbox.RemoveOptions{}) // it was all shown in this result
		}
		return s
	}
	s.Body = res.Output[:res.Cut]
	if nl := strings.IndexByte(res.Output[res.Cut:], '\n'); nl >= 0 {
		s.Tail = res.Output[res.Cut+nl+1:]
	}
	s.Omitted, s.OmittedLines = int(res.DroppedBytes), int(res.DroppedLines)
	b.mu.Lock()
	abs := b.bashFiles[sh.ID()]
	b.mu.Unlock()
	s.FileNote = fileNote(res.OutputFileCut, res.OutputFileBytes, res.OutputFileError)
	if res.OutputFile != "" && (res.OutputFileBytes > 0 || s.FileNote == "") {
		s.FullPath = abs
		if res.Running {
			s.FileNote = "the command is still running and the file still growing"
		}
	}
	return s
}
