// Package docscheck keeps the project's documentation honest: its test
// finds every fenced code block in the Markdown docs (README.md, SECURITY.md,
// CONTRIBUTING.md, CHANGELOG.md, docs/**, .ci/**/README.md) and checks that
// each one is compiled or executed, so that a doc cannot drift from the
// code unnoticed.
//
// The rules, by the block's language:
//
//   - go: a complete program (it has a package clause) that the test
//     compiles against this module; or, with the marker
//     <!-- file: PATH --> on the line before it, the exact contents of PATH
//     (a file that `go vet ./...` compiles and whose own test runs it).
//   - sh: the line before the block says how it is checked:
//     <!-- run --> the test runs it with bash in a temporary directory, with
//     the sandboxkit command built from this tree first on PATH;
//     <!-- ci --> every command line of the block appears in .ci/run or a
//     script under .ci/ (so CI executes it on every run);
//     <!-- equivalent: CMD --> the block needs something a test cannot have
//     (an API key, the published module) and CMD, run from the repository
//     root, exercises the same code (for example the example's own test).
//   - json: must parse.
//   - yaml, text and blocks without a language: output samples and
//     configuration excerpts; they are not code and are not checked, except
//     that a yaml block with <!-- file: PATH --> must equal PATH.
//
// Any other language is an error, so that a new kind of block gets a rule
// before it gets into the docs.
package docscheck

import (
	"bufio"
	"bytes"
	"os"
	"strings"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	// File and Line locate the opening fence (1-based line).
	File string
	Line int
	// Lang is the fence's info string up to the first space ("go", "sh").
	Lang string
	// Marker is the HTML comment on the line before the fence, without
	// "<!--" and "-->" and trimmed ("run", "file: x.go"), or "".
	Marker string
	// Body is the block's text, each line ending in "\n".
	Body string
}

// Blocks returns the fenced code blocks of the Markdown file at path.
// Fences are lines starting with ``` (indented fences are not code blocks
// of these docs).
func Blocks(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		out  []Block
		cur  *Block
		body bytes.Buffer
		prev string
		n    int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur == nil {
			if strings.HasPrefix(line, "```") {
				info := strings.TrimSpace(strings.TrimPrefix(line, "```"))
				lang, _, _ := strings.Cut(info, " ")
				cur = &Block{File: path, Line: n, Lang: lang, Marker: marker(prev)}
				body.Reset()
			} else if strings.TrimSpace(line) != "" {
				prev = line
			}
			continue
		}
		if strings.HasPrefix(line, "```") {
			cur.Body = body.String()
			out = append(out, *cur)
			cur, prev = nil, ""
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	return out, sc.Err()
}

// marker returns the content of an HTML comment line, or "".
func marker(line string) string {
	s := strings.TrimSpace(line)
	if !strings.HasPrefix(s, "<!--") || !strings.HasSuffix(s, "-->") {
		return ""
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(s, "<!--"), "-->"))
}
