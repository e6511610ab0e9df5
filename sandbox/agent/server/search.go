package server

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"regexp/syntax"

	"github.com/sandboxkit/sandboxkit/internal/grep"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

const (
	defaultMaxResults = 200
	maxSearchFile     = 32 << 20 // larger files are skipped by search
	maxMatchLine      = 500      // longer lines are cut in results
)

// search serves fs.search with the search engine (internal/grep) over the
// workspace (searchFS): the engine walks and matches, the workspace
// confines every path it opens.
func (w *workspace) search(ctx context.Context, a wire.FSSearchRequest) (any, *wire.WireError) {
	m, e := compilePattern(a.Pattern, a.IgnoreCase)
	if e != nil {
		return nil, e
	}
	rel, e := w.rel(a.Path)
	if e != nil {
		return nil, e
	}
	for _, g := range append(append([]string{}, a.Include...), a.Exclude...) {
		if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
			return nil, wire.Errorf(wire.CodeInvalidArgument, "bad glob %q: %v", g, err)
		}
	}
	limit := a.MaxResults
	if limit <= 0 {
		limit = defaultMaxResults
	}
	// Searching is the one thing the agent does that needs more than one
	// P (see NarrowProcs): one worker per CPU.
	workers, restore := widenProcs()
	defer restore()
	// Each worker holds a descriptor while it reads a file, out of the
	// sandbox's open-files limit (RLIMIT_NOFILE, as low as 64): at most one
	// per 16 of it, so that a 64-CPU host's 64 workers do not take a small
	// limit's every descriptor. (The walk holds one more, while it lists
	// a directory; a shortage that remains is waited out or reported,
	// never passed over: grep.ErrResources.)
	if workers <= 0 {
		workers = max(2, runtime.GOMAXPROCS(0))
	}
	workers = min(workers, max(2, int(fdLimit()/16)))
	res, err := grep.Search(ctx, searchFS{w}, rel, m, grep.Options{
		Workers:      workers,
		MaxResults:   limit,
		MaxFileSize:  maxSearchFile,
		MaxLineBytes: maxMatchLine,
		SkipDir: func(p string, d fs.DirEntry) bool {
			return !a.All && (d.Name() == ".git" || d.Name() == "node_modules")
		},
		Select: func(p, name string) bool {
			// A write in progress is not a file yet: its matches would
			// name a file that is about to vanish.
			return !strings.HasPrefix(name, tempPrefix) && searchSelects(rel, p, a.Include, a.Exclude)
		},
	})
	if ctx.Err() != nil {
		// The caller gave up (its reply is dropped); the workers stopped
		// inside the file they were reading.
		scanned := 0
		if res != nil {
			scanned = res.Files
		}
		return nil, wire.Errorf(wire.CodeCanceled, "search %q cancelled after %d files", a.Pattern, scanned)
	}
	if errors.Is(err, grep.ErrResources) {
		// Not the file's fault, and not to be passed over (the result
		// would say it is complete): the caller can run the search again.
		why := "too many open files in the sandbox (its open-files limit is " + strconv.FormatUint(fdLimit(), 10) + ")"
		if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
			why = "the system is short of kernel memory"
		}
		return nil, wire.Errorf(wire.CodeBusy, "search %q could not open every file: %s; run the search again once fewer commands and background jobs run (stop those you no longer need), or create the sandbox with a higher open-files limit", a.Pattern, why)
	}
	if err != nil {
		p := a.Path
		if p == "" {
			p = "." // the workspace, not an empty name in the message
		}
		return nil, fsError(p, err)
	}
	rep := wire.FSSearchReply{Matches: make([]wire.Match, len(res.Matches)), Files: res.Files, SkippedBinary: res.SkippedBinary, Truncated: res.Truncated}
	for i, mt := range res.Matches {
		rep.Matches[i] = wire.Match{Path: mt.Path, Line: mt.Line, Text: mt.Text, InvalidUTF8: mt.InvalidUTF8}
	}
	return rep, nil
}

// searchSelects reports whether a search rooted at root (relative to the
// workspace) reads the file p (also relative to the workspace): its path
// below root — its base name when it is the root itself — must match one of
// the include globs, when there are any, and none of the exclude globs.
func searchSelects(root, p string, include, exclude []string) bool {
	sub := p
	if root != "." {
		sub = strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		if sub == "" {
			sub = path.Base(p)
		}
	}
	if len(include) > 0 && !anyGlob(include, sub) {
		return false
	}
	return !anyGlob(exclude, sub)
}

func anyGlob(globs []string, rel string) bool {
	for _, g := range globs {
		if globMatch(g, rel) {
			return true
		}
	}
	return false
}

// compilePattern compiles a search pattern with the engine, as an
// INVALID_ARGUMENT error that says what to change when it is refused.
func compilePattern(pattern string, ignoreCase bool) (*grep.Matcher, *wire.WireError) {
	if pattern == "" {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "search pattern is empty")
	}
	m, err := grep.Compile(pattern, ignoreCase)
	var se *syntax.Error
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, grep.ErrNeedsNewline):
		return nil, wire.Errorf(wire.CodeInvalidArgument, "pattern %q needs a newline (\\n) to match, but search matches within one line: use $ to match at the end of a line, or search for each line's part separately", pattern)
	case errors.As(err, &se):
		return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %s (RE2 syntax: escape literal characters like ( [ . with a backslash)", pattern, se.Code)
	}
	return nil, wire.Errorf(wire.CodeInvalidArgument, "bad regular expression %q: %v", pattern, err)
}
