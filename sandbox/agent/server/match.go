package server

import (
	"context"

	"github.com/sandboxkit/sandboxkit/internal/grep"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// LineMatcher is the search engine's line matcher (grep.Matcher: per line,
// linear in its input for every pattern), under the name the fake backend
// uses until it runs this server (layout.md: temporary).
type LineMatcher struct{ m *grep.Matcher }

// NewLineMatcher compiles a search pattern as fs.search does.
func NewLineMatcher(pattern string, ignoreCase bool) (*LineMatcher, *wire.WireError) {
	m, e := compilePattern(pattern, ignoreCase)
	if e != nil {
		return nil, e
	}
	return &LineMatcher{m}, nil
}

// EachLine calls emit with the bounds of every matching line of data, in
// order, until emit returns false (grep.Matcher.EachLine).
func (l *LineMatcher) EachLine(ctx context.Context, data []byte, emit func(start, end int) bool) error {
	return l.m.EachLine(ctx, data, emit)
}

// Matches returns the matching lines of the text file data, named p, as
// fs.search reports them.
func (l *LineMatcher) Matches(ctx context.Context, p string, data []byte) ([]wire.Match, error) {
	ms, err := l.m.Matches(ctx, p, data, maxMatchLine)
	out := make([]wire.Match, len(ms))
	for i, m := range ms {
		out[i] = wire.Match{Path: m.Path, Line: m.Line, Text: m.Text, InvalidUTF8: m.InvalidUTF8}
	}
	return out, err
}
