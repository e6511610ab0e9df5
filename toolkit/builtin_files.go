package toolkit

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

type readIn struct {
	Path   string `json:"path" description:"file path, relative to the workspace"`
	Offset int    `json:"offset,omitempty" description:"first line, 1-based"`
	Limit  int    `json:"limit,omitempty" description:"lines, default 2000"`
}

type writeIn struct {
	Path    string `json:"path" description:"file path, relative to the workspace"`
	Content string `json:"content" description:"the whole text to write"`
	Append  bool   `json:"append,omitempty" description:"add to the end instead of replacing"`
}

type editIn struct {
	Path       string `json:"path" description:"file path, relative to the workspace"`
	OldText    string `json:"old_text" description:"exact text to replace, unique unless replace_all"`
	NewText    string `json:"new_text" description:"replacement text"`
	ReplaceAll bool   `json:"replace_all,omitempty" description:"replace every occurrence"`
}

type listIn struct {
	Path  string `json:"path,omitempty" description:"default workspace"`
	Depth int    `json:"depth,omitempty" description:"default 1"`
}

type searchIn struct {
	Pattern    string `json:"pattern" description:"RE2 regex"`
	Path       string `json:"path,omitempty" description:"directory or file to search; default workspace"`
	Glob       string `json:"glob,omitempty" description:"file filter, e.g. *.go"`
	IgnoreCase bool   `json:"ignore_case,omitempty" description:"match case-insensitively"`
	MaxResults int    `json:"max_results,omitempty" description:"default 200"`
}

type findIn struct {
	Pattern string `json:"pattern" description:"glob: *.py or src/**/*.go"`
	Path    string `json:"path,omitempty" description:"directory to search; default workspace"`
}

type moveIn struct {
	Source      string `json:"source" description:"path to move"`
	Destination string `json:"destination" description:"new path"`
	Overwrite   bool   `json:"overwrite,omitempty" description:"replace an existing destination"`
}

type deleteIn struct {
	Path      string `json:"path" description:"file or directory, relative to the workspace"`
	Recursive bool   `json:"recursive,omitempty" description:"needed for a non-empty directory"`
}

type chmodIn struct {
	Path string `json:"path" description:"file or directory, relative to the workspace"`
	Mode string `json:"mode" description:"octal, e.g. 755"`
}

func (b *builtins) fileTools() []*Tool {
	return []*Tool{
		New("read_file", "Read a text file as numbered lines. Paths are relative to the workspace. Binary files are reported, not shown.", b.readFile, ReadOnly()),
		New("write_file", "Create or overwrite a file (parent directories are made), or append to it.", b.writeFile, Destructive()),
		New("edit_file", "Replace exact text in a file; prefer it to write_file for small changes.", b.editFile, Destructive()),
		New("list_files", "List a directory (dirs end in /, executables in *). Hidden names are skipped.", b.listFiles, ReadOnly()),
		New("search_files", "Search file contents by regex; prints path:line:text. Skips .git, node_modules, binary files.", b.searchFiles, ReadOnly()),
		New("find_files", "Find files by name glob.", b.findFiles, ReadOnly()),
		New("move_file", "Move or rename a file or directory.", b.moveFile, Destructive()),
		New("delete_file", "Delete a file or directory.", b.deleteFile, Destructive()),
		New("set_permissions", "Set a file's permission bits.", b.setPermissions, Destructive()),
		New("sandbox_info", "Describe the sandbox: workspace, isolation, network, default and max timeouts, Python contexts, where temporary files go, tools present.", b.info, ReadOnly()),
	}
}

func (b *builtins) readFile(ctx context.Context, in readIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	if in.Offset < 0 || in.Limit < 0 {
		return textOut{}, fmt.Errorf("offset and limit must not be negative")
	}
	first := max(in.Offset, 1)
	limit := in.Limit
	if limit == 0 {
		limit = 2000
	}
	c, err := b.sb.Files.Read(ctx, in.Path, sandbox.ReadOptions{Offset: first - 1, Limit: limit, MaxBytes: int64(b.cfg.readLimit)})
	if err != nil {
		return textOut{}, modelErr(err)
	}
	switch {
	case c.Binary:
		return textOut{fmt.Sprintf("%s is a binary file (%d bytes); not shown. Inspect it with run_command (file, xxd, head -c).", in.Path, c.Size)}, nil
	case c.Lines == 0 && c.More:
		return textOut{fmt.Sprintf("line %d of %s is longer than %d bytes; view it with run_command (cut -c, head -c)", first, in.Path, b.cfg.readLimit)}, nil
	case c.Lines == 0 && c.Size == 0:
		return textOut{"(empty file)"}, nil
	case c.Lines == 0:
		return textOut{fmt.Sprintf("(no lines at offset %d: %s is shorter)", first, in.Path)}, nil
	}
	text := NumberLines(string(c.Data), first)
	if c.More {
		last := first + c.Lines - 1
		text = strings.TrimSuffix(text, "\n") + fmt.Sprintf("\n[showing lines %d-%d; the file continues: read_file with offset %d]", first, last, last+1)
	}
	if c.InvalidUTF8 {
		text = strings.TrimSuffix(text, "\n") + "\n[these lines are not valid UTF-8: each invalid byte is shown as \uFFFD; use run_command (xxd, iconv) to see the bytes]"
	}
	return textOut{strings.TrimSuffix(text, "\n")}, nil
}

func (b *builtins) writeFile(ctx context.Context, in writeIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	var err error
	verb := "wrote"
	if in.Append {
		verb = "appended"
		err = b.sb.Files.Append(ctx, in.Path, []byte(in.Content))
	} else {
		err = b.sb.Files.Write(ctx, in.Path, []byte(in.Content), 0)
	}
	if sandbox.CodeOf(err) == sandbox.CodeTooLarge {
		// The sandbox's message names its Go API (CopyIn); the model can only split the write.
		return textOut{}, fmt.Errorf("content is %s, more than one write_file call takes: write the first part, then the rest in parts with append: true (or generate the file with run_command or run_python)", humanBytes(int64(len(in.Content))))
	}
	if err != nil {
		return textOut{}, modelErr(err)
	}
	return textOut{fmt.Sprintf("%s %s to %s", verb, plural(len(in.Content), "byte"), in.Path)}, nil
}

func (b *builtins) editFile(ctx context.Context, in editIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	n, err := b.sb.Files.Edit(ctx, in.Path, in.OldText, in.NewText, sandbox.EditOptions{ReplaceAll: in.ReplaceAll})
	if err != nil {
		return textOut{}, modelErr(err)
	}
	return textOut{fmt.Sprintf("replaced %s in %s", plural(n, "occurrence"), in.Path)}, nil
}

func (b *builtins) listFiles(ctx context.Context, in listIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	l, err := b.sb.Files.List(ctx, in.Path, sandbox.ListOptions{Depth: in.Depth})
	if err != nil {
		return textOut{}, modelErr(err)
	}
	if len(l.Entries) == 0 {
		return textOut{"(empty directory)"}, nil
	}
	var sb strings.Builder
	for _, e := range l.Entries {
		switch e.Type {
		case "dir":
			sb.WriteString(shownName(e.Path) + "/\n")
		case "symlink":
			sb.WriteString(shownName(e.Path) + " -> " + shownName(e.Target) + "\n")
		default:
			mark := ""
			if e.Mode&0o111 != 0 {
				mark = "*"
			}
			fmt.Fprintf(&sb, "%s%s  %d\n", shownName(e.Path), mark, e.Size)
		}
	}
	text, omitted := Truncate(sb.String(), b.cfg.readLimit)
	if l.Truncated || omitted > 0 {
		text += "[listing cut short: list a subdirectory or use a smaller depth]"
	}
	return textOut{strings.TrimSuffix(text, "\n")}, nil
}

func (b *builtins) searchFiles(ctx context.Context, in searchIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	opt := sandbox.SearchOptions{Pattern: in.Pattern, Path: in.Path, IgnoreCase: in.IgnoreCase, MaxResults: in.MaxResults}
	if in.Glob != "" {
		opt.Include = []string{in.Glob}
	}
	if in.Path == "" || in.Path == "." {
		// Saved command outputs would echo earlier results back into every search.
		opt.Exclude = []string{b.cfg.outputDir + "/**"}
	}
	r, err := b.sb.Files.Search(ctx, opt)
	if err != nil {
		return textOut{}, modelErr(err)
	}
	if len(r.Matches) == 0 {
		return textOut{fmt.Sprintf("no matches (%s searched)", plural(r.Files, "file"))}, nil
	}
	var sb strings.Builder
	invalid := 0
	for _, m := range r.Matches {
		line, cut := Truncate(m.Text, 300)
		if cut > 0 {
			line += "…"
		}
		if m.InvalidUTF8 {
			invalid++
		}
		fmt.Fprintf(&sb, "%s:%d:%s\n", shownName(m.Path), m.Line, strings.TrimRight(line, "\r\n"))
	}
	text, omitted := Truncate(sb.String(), b.cfg.readLimit)
	if r.Truncated || omitted > 0 {
		text += "[more matches not shown: narrow path or glob, or raise max_results]\n"
	}
	if r.SkippedBinary > 0 {
		text += fmt.Sprintf("[%s matched too (not shown)]\n", plural(r.SkippedBinary, "binary file"))
	}
	if invalid > 0 {
		text += fmt.Sprintf("[%s of these are not valid UTF-8: each invalid byte is shown as \uFFFD]\n", plural(invalid, "line"))
	}
	return textOut{strings.TrimSuffix(text, "\n")}, nil
}

func (b *builtins) findFiles(ctx context.Context, in findIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	g, err := b.sb.Files.Glob(ctx, in.Pattern, in.Path)
	if err != nil {
		return textOut{}, modelErr(err)
	}
	if len(g.Paths) == 0 {
		return textOut{fmt.Sprintf("no files match %q", in.Pattern)}, nil
	}
	shown := make([]string, len(g.Paths))
	for i, p := range g.Paths {
		shown[i] = shownName(p)
	}
	text, omitted := Truncate(strings.Join(shown, "\n")+"\n", b.cfg.readLimit)
	if g.Truncated || omitted > 0 {
		text += "[more files not shown: narrow the pattern or path]"
	}
	return textOut{strings.TrimSuffix(text, "\n")}, nil
}

func (b *builtins) moveFile(ctx context.Context, in moveIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	if err := b.sb.Files.Move(ctx, in.Source, in.Destination, sandbox.MoveOptions{Overwrite: in.Overwrite}); err != nil {
		return textOut{}, modelErr(err)
	}
	return textOut{"moved " + in.Source + " to " + in.Destination}, nil
}

func (b *builtins) deleteFile(ctx context.Context, in deleteIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	if err := b.sb.Files.Remove(ctx, in.Path, sandbox.RemoveOptions{Recursive: in.Recursive}); err != nil {
		if sandbox.CodeOf(err) == sandbox.CodeExists && !in.Recursive {
			// The sandbox reports ENOTEMPTY as "already exists", which would mislead the model.
			return textOut{}, fmt.Errorf("%s is a non-empty directory: set recursive to delete it with its contents", in.Path)
		}
		return textOut{}, modelErr(err)
	}
	return textOut{"deleted " + in.Path}, nil
}

func (b *builtins) setPermissions(ctx context.Context, in chmodIn) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	m, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(in.Mode), "0o"), 8, 32)
	if err != nil || m > 0o777 {
		return textOut{}, fmt.Errorf("mode %q is not an octal permission between 000 and 777, e.g. \"755\"", in.Mode)
	}
	if err := b.sb.Files.Chmod(ctx, in.Path, fs.FileMode(m)); err != nil {
		return textOut{}, modelErr(err)
	}
	return textOut{fmt.Sprintf("set mode %04o on %s", m, in.Path)}, nil
}

func (b *builtins) info(ctx context.Context, _ struct{}) (textOut, error) {
	if err := b.check(); err != nil {
		return textOut{}, err
	}
	i := b.sb.Info()
	network := networkState(i)
	python := i.Python
	if python == "" {
		python = "none"
	}
	bash := i.Bash
	if bash == "" {
		bash = "none"
	}
	fields := []Field{
		{Name: "workspace", Value: i.Workspace},
		{Name: "isolation", Value: i.Isolation.String()},
		{Name: "network", Value: network},
		{Name: "python", Value: python},
		{Name: "bash", Value: bash},
		{Name: "command timeout", Value: fmt.Sprintf("%s default (when timeout_seconds is not given), %s max", i.Limits.Timeout, i.Limits.MaxTimeout)},
		{Name: "output shown", Value: fmt.Sprintf("%d bytes per stream (start and end; the whole output is saved in a file)", b.cfg.outputLimit)},
		{Name: "python contexts", Value: b.pythonContexts(ctx)},
	}
	fields = append(fields, tierLimits(i)...)
	return textOut{Render(fields)}, nil
}

// pythonContexts lists the Python contexts with their runs, so a model reuses or adds one by
// name.
func (b *builtins) pythonContexts(ctx context.Context) string {
	if !b.sb.Info().PythonAvailable {
		return ""
	}
	var names []string
	cs, _ := b.sb.Python.List(ctx) // a closed sandbox fails the call elsewhere; here the list is empty
	for _, c := range cs {
		names = append(names, fmt.Sprintf("%s (%s)", c.Name, plural(c.ExecutionCount, "run")))
	}
	list := "none yet"
	if len(names) > 0 {
		list = strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s; at most %d (a new context_id of run_python creates one)", list, sandbox.MaxPythonContexts)
}

// tierLimits tells the model, in a line or two, what the isolation tier in force means in
// practice: where temporary files go and what it can see. A model that writes to /tmp on the
// landlock tier fails with "Permission denied" and guesses; told first, it uses $TMPDIR.
func tierLimits(i sandbox.Info) []Field {
	var out []Field
	if t := i.Extra["tmpdir"]; t != "" && t != "/tmp" {
		out = append(out, Field{Name: "temporary files", Value: "/tmp is not writable here: use $TMPDIR (" + t + ") or the workspace"})
	}
	for _, c := range i.Controls {
		if c.Name == "processes_visible" && !c.Enforced {
			out = append(out, Field{Name: "processes", Value: "ps and /proc show host processes too (no pid namespace); only the sandbox's own are yours"})
		}
	}
	return out
}

// networkState tells the model what the network really is: "off" only when a
// control enforces it, because a weaker tier that shares the host's network
// must not be described to the model as offline.
func networkState(i sandbox.Info) string {
	if i.Network {
		return "on (allowed by the host program)"
	}
	if i.Egress != nil {
		return egressState(i.Egress)
	}
	for _, c := range i.Controls {
		if c.Name == "network" {
			if c.Enforced {
				return "off"
			}
			return "NOT blocked (" + c.Mechanism + ")"
		}
	}
	return "NOT blocked (no control reported)"
}

// shownName is a path as a model reads it in a listing: as it is, or
// quoted with escapes when it holds a control character (a name with a
// newline, which a command can make, would read as two entries).
func shownName(p string) string {
	if strings.ContainsFunc(p, unicode.IsControl) {
		return strconv.Quote(p)
	}
	return p
}
