package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Files reads, writes and searches the sandbox's workspace. Paths are
// relative to the workspace, or absolute under it (e.g. /workspace/a.txt).
// Confinement has os.Root semantics, enforced inside the sandbox: "..",
// absolute paths elsewhere and symbolic links leading out (including ones
// a command created, or swapped in during a call) fail with
// SBX_PATH_ESCAPE.
type Files struct{ sb *Sandbox }

// ReadOptions selects part of a file. With Limit > 0 Read returns lines
// [Offset, Offset+Limit) (Offset counts from 0); otherwise the whole file.
type ReadOptions struct {
	Offset int
	Limit  int
	// MaxBytes caps the bytes returned (default DefaultReadMaxBytes; at
	// most 16 MiB − 64 KiB, one protocol frame). A whole-file read of a
	// larger file fails with SBX_TOO_LARGE.
	MaxBytes int64
}

// Defaults of the option structs' caps, applied when the field is 0.
const (
	// DefaultReadMaxBytes is ReadOptions.MaxBytes's default: 8 MiB.
	DefaultReadMaxBytes = 8 << 20
	// DefaultListMax is ListOptions.Max's default.
	DefaultListMax = 1000
	// DefaultSearchMaxResults is SearchOptions.MaxResults's default.
	DefaultSearchMaxResults = 200
)

// FileContent is what Read returns.
type FileContent struct {
	// Data is the content read: the whole file, or the lines asked for.
	Data []byte
	// Size is the file's size in bytes.
	Size int64
	// Binary reports a binary file (a NUL byte near the start). In line
	// mode no data is returned for it.
	Binary bool
	// Lines is the number of lines returned in line mode; More says that
	// lines remain after them.
	Lines int
	More  bool
	// Truncated says MaxBytes cut the content.
	Truncated bool
	// InvalidUTF8 says Data (of a file not reported Binary) is not valid
	// UTF-8. Data holds the bytes as they are; a text view of them (a
	// string in JSON, the read_file tool) shows each bad byte as U+FFFD.
	InvalidUTF8 bool
}

// Entry describes one file or directory.
type Entry struct {
	Path    string      // relative to the workspace, slash-separated
	Type    string      // "file", "dir", "symlink" or "other"
	Size    int64       // in bytes
	Mode    fs.FileMode // type and permission bits
	ModTime time.Time   // last modification
	Target  string      // a symlink's target
}

func entry(e wire.Entry) Entry {
	return Entry{Path: e.Path, Type: e.Type, Size: e.Size, Mode: fs.FileMode(e.Mode), ModTime: time.Unix(0, e.ModTime), Target: e.Target}
}

// ListOptions tunes List.
type ListOptions struct {
	// Depth is how deep to go (1 = direct children, the default).
	Depth int
	// Hidden includes names starting with ".".
	Hidden bool
	// Max caps the entries returned (default DefaultListMax).
	Max int
}

// Listing is a directory listing.
type Listing struct {
	// Entries are the directory's entries, in walk order (lexical, parents
	// before their children).
	Entries []Entry
	// Truncated is set when ListOptions.Max cut the listing.
	Truncated bool
}

// SearchOptions is a content search.
type SearchOptions struct {
	// Pattern is a regular expression (RE2 syntax), matched within each
	// line as grep does: a match never spans a newline (\s and [^x] do
	// not match it, \A and \z act as ^ and $), and a pattern that needs
	// a newline is refused with SBX_INVALID_ARGUMENT. The search takes
	// time linear in the bytes searched for every pattern, and stops, in
	// the sandbox too, when ctx ends.
	Pattern string
	// Path limits the search to a directory or file (default: workspace).
	Path string
	// Include and Exclude are globs ("*.go", "src/**/*.py"); a glob
	// without "/" matches the file's base name.
	Include, Exclude []string
	IgnoreCase       bool
	// MaxResults caps the matches (default DefaultSearchMaxResults).
	MaxResults int
	// All also searches .git and node_modules, skipped by default.
	All bool
}

// SearchResult holds matches in path, then line order.
type SearchResult struct {
	// Matches are the matching lines, sorted by path, then line.
	Matches []Match
	// Truncated is set when more lines matched than SearchOptions.MaxResults.
	Truncated bool
	// Files is the number of files scanned; SkippedBinary counts binary
	// files that matched but were not reported line by line.
	Files         int
	SkippedBinary int
}

// Match is one matching line ("path:line:text").
type Match struct {
	// Path is the file's path, relative to the workspace.
	Path string
	// Line is the line's number, counted from 1.
	Line int
	// Text is the line, without its newline.
	Text string
	// InvalidUTF8 says the line is not valid UTF-8: Text shows each bad
	// byte as U+FFFD.
	InvalidUTF8 bool
}

func (f *Files) do(ctx context.Context, op, agentOp, sum string, args, out any) error {
	start := time.Now()
	err := f.sb.check(op)
	if err == nil {
		err = checkPaths(op, requestPaths(args)...)
	}
	if err == nil {
		err = checkNewNames(op, createdPaths(agentOp, args)...)
	}
	if err == nil {
		err = wrapErr(op, f.sb.client.Do(ctx, agentOp, args, out))
	}
	f.sb.auditEvent(ctx, op, sum, start, err)
	return err
}

// Read reads a file, whole or by lines.
func (f *Files) Read(ctx context.Context, path string, opt ReadOptions) (*FileContent, error) {
	if opt.Offset < 0 || opt.Limit < 0 || opt.MaxBytes < 0 {
		return nil, newError(CodeInvalidArgument, "Files.Read", "offset, limit and max bytes must not be negative")
	}
	if opt.MaxBytes == 0 {
		opt.MaxBytes = DefaultReadMaxBytes
	}
	var rep wire.FSReadReply
	if err := f.do(ctx, "Files.Read", wire.OpFSRead.Name, path, wire.FSReadRequest{Path: path, Offset: opt.Offset, Limit: opt.Limit, MaxBytes: opt.MaxBytes}, &rep); err != nil {
		return nil, err
	}
	return &FileContent{Data: rep.Data, Size: rep.Size, Binary: rep.Binary, Lines: rep.Lines, More: rep.More, Truncated: rep.Truncated,
		InvalidUTF8: !rep.Binary && !utf8.Valid(rep.Data)}, nil
}

// ReadFile returns a whole file's bytes (binary or not).
func (f *Files) ReadFile(ctx context.Context, path string) ([]byte, error) {
	c, err := f.Read(ctx, path, ReadOptions{})
	if err != nil {
		return nil, err
	}
	return c.Data, nil
}

// maxInlineWrite is the largest Write/Append payload; larger data goes
// through CopyIn.
const maxInlineWrite = 8 << 20

// Write replaces a file atomically (a reader sees the old or the new
// content, never a mix), creating parent directories; through a symbolic
// link inside the workspace it replaces the file the link leads to. The
// new content is written beside the old before it replaces it: when that
// does not fit, Write fails (SBX_QUOTA for the sandbox's disk quota,
// SBX_NO_SPACE for a full file system) and the old file is unchanged.
// mode 0 keeps an existing file's mode, or uses 0644.
func (f *Files) Write(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return f.write(ctx, "Files.Write", path, data, mode, false)
}

// Append adds data at the end of a file, creating it if needed. It
// writes in place (a log is not copied per line); an append that fails
// part way, on a full disk say, is cut back, leaving the file as it was.
func (f *Files) Append(ctx context.Context, path string, data []byte) error {
	return f.write(ctx, "Files.Append", path, data, 0, true)
}

func (f *Files) write(ctx context.Context, op, path string, data []byte, mode fs.FileMode, app bool) error {
	if len(data) > maxInlineWrite {
		return newError(CodeTooLarge, op, "%d bytes is over the %d byte limit of one write: use CopyIn for large files", len(data), maxInlineWrite)
	}
	if mode&^fs.ModePerm != 0 {
		return newError(CodeInvalidArgument, op, "mode %v has bits other than permissions", mode)
	}
	return f.do(ctx, op, wire.OpFSWrite.Name, fmt.Sprintf("%s (%d bytes)", path, len(data)), wire.FSWriteRequest{Path: path, Data: data, Mode: uint32(mode), Append: app}, nil)
}

// EditOptions tunes Files.Edit.
type EditOptions struct {
	// ReplaceAll replaces every occurrence of the old text; without it,
	// more than one occurrence fails with SBX_AMBIGUOUS.
	ReplaceAll bool
}

// Edit replaces old with new in a file. It fails with SBX_NO_MATCH when
// old does not occur, and with SBX_AMBIGUOUS when it occurs more than once
// and opt.ReplaceAll is false. It returns the number of replacements. The
// file is replaced atomically, as by Write.
func (f *Files) Edit(ctx context.Context, path, old, new string, opt EditOptions) (int, error) {
	var rep wire.FSEditReply
	err := f.do(ctx, "Files.Edit", wire.OpFSEdit.Name, path, wire.FSEditRequest{Path: path, Old: old, New: new, ReplaceAll: opt.ReplaceAll}, &rep)
	return rep.Replacements, err
}

// List lists a directory.
func (f *Files) List(ctx context.Context, path string, opt ListOptions) (*Listing, error) {
	if opt.Max <= 0 {
		opt.Max = DefaultListMax
	}
	var rep wire.FSListReply
	if err := f.do(ctx, "Files.List", wire.OpFSList.Name, path, wire.FSListRequest{Path: path, Depth: opt.Depth, Hidden: opt.Hidden, Max: opt.Max}, &rep); err != nil {
		return nil, err
	}
	l := &Listing{Truncated: rep.Truncated, Entries: make([]Entry, len(rep.Entries))}
	for i, e := range rep.Entries {
		l.Entries[i] = entry(e)
	}
	return l, nil
}

// Stat describes one path (a symlink itself, not its target).
func (f *Files) Stat(ctx context.Context, path string) (Entry, error) {
	var rep wire.Entry
	err := f.do(ctx, "Files.Stat", wire.OpFSStat.Name, path, wire.FSPathRequest{Path: path}, &rep)
	return entry(rep), err
}

// Mkdir creates a directory and its parents.
func (f *Files) Mkdir(ctx context.Context, path string) error {
	return f.do(ctx, "Files.Mkdir", wire.OpFSMkdir.Name, path, wire.FSPathRequest{Path: path}, nil)
}

// MoveOptions tunes Files.Move.
type MoveOptions struct {
	// Overwrite replaces an existing destination; without it, an existing
	// destination fails with SBX_EXISTS.
	Overwrite bool
}

// Move renames a file or directory. An existing destination is replaced
// only when opt.Overwrite is set.
func (f *Files) Move(ctx context.Context, from, to string, opt MoveOptions) error {
	return f.do(ctx, "Files.Move", wire.OpFSMove.Name, from+" -> "+to, wire.FSMoveRequest{From: from, To: to, Overwrite: opt.Overwrite}, nil)
}

// CopyOptions tunes Files.Copy.
type CopyOptions struct {
	// Overwrite replaces an existing destination; without it, an existing
	// destination fails with SBX_EXISTS.
	Overwrite bool
}

// Copy copies a file or a directory tree. An existing destination is
// replaced only when opt.Overwrite is set.
func (f *Files) Copy(ctx context.Context, from, to string, opt CopyOptions) error {
	return f.do(ctx, "Files.Copy", wire.OpFSCopy.Name, from+" -> "+to, wire.FSMoveRequest{From: from, To: to, Overwrite: opt.Overwrite}, nil)
}

// RemoveOptions tunes Files.Remove.
type RemoveOptions struct {
	// Recursive removes a directory with its contents; without it, a
	// non-empty directory is not removed.
	Recursive bool
}

// Remove deletes a file, or a directory with its contents when
// opt.Recursive is set (a non-empty directory otherwise fails).
func (f *Files) Remove(ctx context.Context, path string, opt RemoveOptions) error {
	return f.do(ctx, "Files.Remove", wire.OpFSRemove.Name, path, wire.FSPathRequest{Path: path, Recursive: opt.Recursive}, nil)
}

// Chmod sets permission bits (0-0777; setuid, setgid and sticky bits are
// refused).
func (f *Files) Chmod(ctx context.Context, path string, mode fs.FileMode) error {
	if mode&^fs.ModePerm != 0 {
		return newError(CodeInvalidArgument, "Files.Chmod", "mode %v: only permission bits (0-0777) can be set", mode)
	}
	return f.do(ctx, "Files.Chmod", wire.OpFSChmod.Name, fmt.Sprintf("%s %#o", path, mode), wire.FSChmodRequest{Path: path, Mode: uint32(mode)}, nil)
}

// Search finds lines matching a regular expression, skipping binary files
// and, unless All is set, .git and node_modules. It finds every match or
// fails: where the sandbox has no descriptors left to open a file or a
// directory (its open-files limit, shared with the commands it runs) and
// a short wait does not free one, the search fails with SBX_BUSY rather
// than return a result that lacks those files.
func (f *Files) Search(ctx context.Context, opt SearchOptions) (*SearchResult, error) {
	if opt.MaxResults <= 0 {
		opt.MaxResults = DefaultSearchMaxResults
	}
	var rep wire.FSSearchReply
	if err := f.do(ctx, "Files.Search", wire.OpFSSearch.Name, opt.Pattern, wire.FSSearchRequest{
		Pattern: opt.Pattern, Path: opt.Path, Include: opt.Include, Exclude: opt.Exclude,
		IgnoreCase: opt.IgnoreCase, MaxResults: opt.MaxResults, All: opt.All,
	}, &rep); err != nil {
		return nil, err
	}
	matches := make([]Match, len(rep.Matches))
	for i, m := range rep.Matches {
		matches[i] = Match{Path: m.Path, Line: m.Line, Text: m.Text, InvalidUTF8: m.InvalidUTF8}
	}
	return &SearchResult{Matches: matches, Truncated: rep.Truncated, Files: rep.Files, SkippedBinary: rep.SkippedBinary}, nil
}

// GlobResult lists paths found by name.
type GlobResult struct {
	// Paths are the matching paths, relative to the workspace, sorted.
	Paths []string
	// Truncated is set when more paths matched than are returned.
	Truncated bool
}

// Glob finds files by name under dir ("" = workspace): a pattern without
// "/" matches base names at any depth ("*.py"); one with "/" matches the
// relative path, with "**" for any number of directories.
func (f *Files) Glob(ctx context.Context, pattern, dir string) (*GlobResult, error) {
	var rep wire.FSGlobReply
	if err := f.do(ctx, "Files.Glob", wire.OpFSGlob.Name, pattern, wire.FSGlobRequest{Pattern: pattern, Path: dir}, &rep); err != nil {
		return nil, err
	}
	return &GlobResult{Paths: rep.Paths, Truncated: rep.Truncated}, nil
}

// CopyIn extracts a tar stream into dir in the workspace (host ->
// sandbox). Entries leading outside dir, or named with control
// characters, are refused; limits apply. Each file is replaced
// atomically, as by Write: when the stream fails or ends inside an entry,
// or the sandbox is killed meanwhile, that file keeps its old content (the
// entries before it are written). A failing tarStream's own error is
// returned (errors.Is finds it), with SBX_INVALID_ARGUMENT.
func (f *Files) CopyIn(ctx context.Context, dir string, tarStream io.Reader) error {
	const op = "Files.CopyIn"
	start := time.Now()
	err := f.copyIn(ctx, dir, tarStream)
	f.sb.auditEvent(ctx, op, dir, start, err)
	return err
}

func (f *Files) copyIn(ctx context.Context, dir string, tarStream io.Reader) error {
	const op = "Files.CopyIn"
	if err := f.sb.check(op); err != nil {
		return err
	}
	if err := checkPaths(op, dir); err != nil {
		return err
	}
	if err := checkNewNames(op, dir); err != nil {
		return err
	}
	call, err := f.sb.client.StartContext(ctx, wire.OpFSCopyIn.Name, wire.FSPathRequest{Path: dir}, agent.Handlers{})
	if err != nil {
		return wrapErr(op, err)
	}
	// A source that fails ends the stream where it failed: the agent
	// writes every entry it received whole, and the entry cut short is
	// refused (its old file stays), as for any tar stream that ends inside
	// an entry. The source's own error is what the caller gets; it is
	// recorded before the input is closed, so it is there when the call
	// returns. (Cancelling the call instead raced with the entries already
	// sent: CI saw an entry completed before the failure not written.)
	src := &sourceErr{r: tarStream}
	// So does input the stream could not take (agent.ErrStalled: the
	// agent reads nothing); its error is the caller's, never a success
	// with the later entries missing.
	sink := &sinkErr{w: call}
	go func() {
		io.Copy(sink, src)
		_ = call.CloseInput()
	}()
	_, err = call.WaitContext(ctx)
	if src.failed() != nil {
		return &Error{Code: CodeInvalidArgument, Op: op, Message: fmt.Sprintf("reading the tar stream failed: %v; files it completed before were written, the one in progress was not (an existing file of that name is unchanged)", src.failed()), Err: src.failed()}
	}
	if werr := sink.failed(); werr != nil {
		e := wrapErr(op, werr).(*Error)
		e.Message += "; sending the tar stream stopped there: files it completed before were written, the one in progress was not"
		return e
	}
	return wrapErr(op, err)
}

// errRecord holds the first error recorded by a goroutine for another
// to read (sourceErr, sinkErr).
type errRecord struct {
	mu  sync.Mutex
	err error
}

func (r *errRecord) record(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

func (r *errRecord) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// sourceErr records the error of the caller's reader, to tell it from the
// stream to the sandbox failing.
type sourceErr struct {
	r io.Reader
	errRecord
}

func (s *sourceErr) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.record(err)
	}
	return n, err
}

// sinkErr writes a call's input to w and records whether the stream
// could not take some of it (agent.ErrStalled: nothing of that write was
// sent). Other write errors (the call ended: the program stopped reading
// its input, or the agent is gone) are the call's own to report.
type sinkErr struct {
	w io.Writer
	errRecord
}

func (s *sinkErr) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if errors.Is(err, agent.ErrStalled) {
		s.record(err)
	}
	return n, err
}

// CopyOut writes a tar stream of path (a file or a directory tree) to w
// (sandbox -> host).
func (f *Files) CopyOut(ctx context.Context, path string, w io.Writer) error {
	const op = "Files.CopyOut"
	start := time.Now()
	err := f.copyOut(ctx, path, w)
	f.sb.auditEvent(ctx, op, path, start, err)
	return err
}

func (f *Files) copyOut(ctx context.Context, path string, w io.Writer) error {
	const op = "Files.CopyOut"
	if err := f.sb.check(op); err != nil {
		return err
	}
	if err := checkPaths(op, path); err != nil {
		return err
	}
	// Data arrives on the client's reader goroutine, which must not block:
	// hand it to a writer goroutine, crediting the agent only once written.
	chunks := make(chan []byte, 2*wire.Window/(32<<10))
	var mu sync.Mutex
	finished := false
	call, err := f.sb.client.StartContext(ctx, wire.OpFSCopyOut.Name, wire.FSPathRequest{Path: path}, agent.Handlers{
		ManualAck: true,
		OnData: func(_ wire.FrameType, b []byte) {
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				chunks <- b
			}
		},
	})
	if err != nil {
		return wrapErr(op, err)
	}
	werrc := make(chan error, 1)
	go func() {
		var werr error
		for b := range chunks {
			if werr == nil {
				_, werr = w.Write(b)
			}
			call.Ack(len(b))
		}
		werrc <- werr
	}()
	raw, err := call.WaitContext(ctx)
	mu.Lock()
	finished = true
	close(chunks)
	mu.Unlock()
	werr := <-werrc
	if err != nil {
		return wrapErr(op, err)
	}
	if werr != nil {
		return newError(CodeInternal, op, "writing the tar stream: %v", werr)
	}
	_ = json.RawMessage(raw)
	return nil
}

// requestPaths returns the paths a file request names.
func requestPaths(args any) []string {
	switch a := args.(type) {
	case wire.FSReadRequest:
		return []string{a.Path}
	case wire.FSWriteRequest:
		return []string{a.Path}
	case wire.FSEditRequest:
		return []string{a.Path}
	case wire.FSPathRequest:
		return []string{a.Path}
	case wire.FSListRequest:
		return []string{a.Path}
	case wire.FSMoveRequest:
		return []string{a.From, a.To}
	case wire.FSChmodRequest:
		return []string{a.Path}
	case wire.FSSearchRequest:
		return []string{a.Path}
	case wire.FSGlobRequest:
		return []string{a.Path}
	}
	return nil
}

// createdPaths returns the paths a file request may create.
func createdPaths(agentOp string, args any) []string {
	switch a := args.(type) {
	case wire.FSWriteRequest:
		return []string{a.Path}
	case wire.FSPathRequest:
		if agentOp == wire.OpFSMkdir.Name {
			return []string{a.Path}
		}
	case wire.FSMoveRequest:
		return []string{a.To}
	}
	return nil
}

// Limits of Linux file systems (NAME_MAX, PATH_MAX), checked before a
// request leaves the host so that a name too long is a clear argument
// error on every backend (it was SBX_INTERNAL with a 10 KB message).
const (
	maxNameBytes = 255
	maxPathBytes = 4095
)

// checkPaths refuses paths that are not valid UTF-8 before they reach the
// JSON protocol, which would replace the bad bytes with U+FFFD and so name
// a different file than the caller meant, and paths longer than a file
// system takes. Messages show long paths cut short.
func checkPaths(op string, paths ...string) error {
	for _, p := range paths {
		if !utf8.ValidString(p) {
			return newError(CodeInvalidArgument, op, "path %s is not valid UTF-8: name files with text, or rename the file from a command", shortPath(p))
		}
		if len(p) > maxPathBytes {
			return newError(CodeInvalidArgument, op, "path %s is %d bytes long, over the limit of %d: use a shorter path", shortPath(p), len(p), maxPathBytes)
		}
		for _, name := range strings.Split(p, "/") {
			if len(name) > maxNameBytes {
				return newError(CodeInvalidArgument, op, "the name %s in path %s is %d bytes long, over the limit of %d bytes for one file or directory name: use a shorter name", shortPath(name), shortPath(p), len(name), maxNameBytes)
			}
		}
	}
	return nil
}

// checkNewNames refuses to create a path holding a control character: a
// name with a newline reads as two names in every listing (list_files
// printed it as two entries), and one with escape sequences can rewrite
// a terminal that shows it. Existing files with such names (a command can
// make them) can still be read, moved away and removed.
func checkNewNames(op string, paths ...string) error {
	for _, p := range paths {
		for i, r := range p {
			if unicode.IsControl(r) {
				return newError(CodeInvalidArgument, op, "path %s has a control character (%U at byte %d): file names may not contain newlines, tabs or other control characters; choose another name", shortPath(p), r, i)
			}
		}
	}
	return nil
}

// shortPath quotes p for a message, cut in the middle when it is long.
func shortPath(p string) string {
	const keep = 60
	if len(p) <= 2*keep {
		return strconv.Quote(p)
	}
	head, tail := p[:keep], p[len(p)-keep:]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return strconv.Quote(head) + "…" + strconv.Quote(tail)
}
