package docscheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// root is the repository root, two levels above this package.
var root = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}()

// docFiles lists the Markdown files whose blocks are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, name := range []string{"README.md", "SECURITY.md", "CONTRIBUTING.md", "CHANGELOG.md"} {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			files = append(files, filepath.Join(root, name))
		}
	}
	for _, dir := range []string{"docs", ".ci"} {
		filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
				files = append(files, p)
			}
			return nil
		})
	}
	if len(files) < 3 {
		t.Fatalf("found only %v: is the test running in internal/docscheck?", files)
	}
	return files
}

func rel(p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}

// TestEveryDocBlockIsChecked applies the package's rules to every block.
// Blocks that run programs (go builds, sh runs) are collected and run by
// the subtests below, so that this test's failures read as a list.
func TestEveryDocBlockIsChecked(t *testing.T) {
	ci := ciScripts(t)
	var programs, runs, equivalents []Block
	for _, f := range docFiles(t) {
		blocks, err := Blocks(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			where := fmt.Sprintf("%s:%d", rel(b.File), b.Line)
			file, isFile := strings.CutPrefix(b.Marker, "file:")
			file = strings.TrimSpace(file)
			switch {
			case isFile:
				data, err := os.ReadFile(filepath.Join(root, file))
				if err != nil {
					t.Errorf("%s: the block says it is %s: %v", where, file, err)
				} else if strings.TrimSpace(string(data)) != strings.TrimSpace(b.Body) {
					t.Errorf("%s: the block differs from %s: copy the file into the doc", where, file)
				}
			case b.Lang == "go":
				if !regexp.MustCompile(`(?m)^package \w+`).MatchString(b.Body) {
					t.Errorf("%s: a go block must be a complete program (package clause), or name the file it shows with <!-- file: PATH -->", where)
					continue
				}
				programs = append(programs, b)
			case b.Lang == "sh" || b.Lang == "bash":
				switch {
				case b.Marker == "run":
					runs = append(runs, b)
				case b.Marker == "ci":
					for _, cmd := range commands(b.Body) {
						if !inCI(ci, cmd) {
							t.Errorf("%s: %q is marked <!-- ci --> but no line of .ci/run or .ci/*.sh runs it", where, cmd)
						}
					}
				case strings.HasPrefix(b.Marker, "equivalent:"):
					equivalents = append(equivalents, b)
				default:
					t.Errorf("%s: a sh block needs a marker on the line before it: <!-- run -->, <!-- ci --> or <!-- equivalent: CMD --> (see package docscheck)", where)
				}
			case b.Lang == "json":
				if !json.Valid([]byte(b.Body)) {
					t.Errorf("%s: the json block does not parse", where)
				}
			case b.Lang == "" || b.Lang == "text" || b.Lang == "yaml":
				// Output samples and configuration excerpts.
			default:
				t.Errorf("%s: no rule for %q blocks: add one to package docscheck before using them", where, b.Lang)
			}
		}
	}
	t.Run("go programs compile", func(t *testing.T) {
		for i, b := range programs {
			dir := filepath.Join(root, "internal", "docscheck", fmt.Sprintf(".block%d", i))
			os.RemoveAll(dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			name := "main.go"
			if strings.Contains(b.Body, "func Test") || strings.Contains(b.Body, "func Example") {
				name = "doc_test.go"
			}
			os.WriteFile(filepath.Join(dir, name), []byte(b.Body), 0o644)
			args := []string{"vet", "./" + rel(dir)}
			out, err := goCmd(t, args...)
			os.RemoveAll(dir)
			if err != nil {
				t.Errorf("%s:%d: the go block does not compile (go vet):\n%s", rel(b.File), b.Line, out)
			}
		}
	})
	t.Run("sh blocks run", func(t *testing.T) {
		if len(runs) == 0 {
			return
		}
		bin := t.TempDir()
		if out, err := goCmd(t, "build", "-o", filepath.Join(bin, "sandboxkit"), "./cmd/sandboxkit"); err != nil {
			t.Fatalf("building sandboxkit: %v\n%s", err, out)
		}
		for _, b := range runs {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.Body)
			cmd.Dir = t.TempDir()
			os.Chmod(cmd.Dir, 0o755)
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "SANDBOXKIT_REPO="+root)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s:%d: the block failed (%v):\n%s\noutput:\n%s", rel(b.File), b.Line, err, b.Body, out)
			}
		}
	})
	t.Run("equivalents run", func(t *testing.T) {
		seen := map[string]bool{}
		for _, b := range equivalents {
			eq := strings.TrimSpace(strings.TrimPrefix(b.Marker, "equivalent:"))
			if seen[eq] {
				continue
			}
			seen[eq] = true
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", eq)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s:%d: its equivalent %q failed (%v):\n%s", rel(b.File), b.Line, eq, err, out)
			}
		}
	})
}

func goCmd(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	return cmd.CombinedOutput()
}

// ciScripts returns the lines of .ci/run and the scripts under .ci/.
func ciScripts(t *testing.T) []string {
	t.Helper()
	var lines []string
	filepath.WalkDir(filepath.Join(root, ".ci"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Base(p) != "run" && !strings.HasSuffix(p, ".sh")) {
			return nil
		}
		data, _ := os.ReadFile(p)
		lines = append(lines, strings.Split(string(data), "\n")...)
		return nil
	})
	if len(lines) == 0 {
		t.Fatal("no .ci/run")
	}
	return lines
}

// commands splits a sh block into its commands: one per line, comments
// dropped, && lists split.
func commands(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		for _, c := range strings.Split(line, "&&") {
			if c = strings.TrimSpace(c); c != "" && !strings.HasPrefix(c, "#") {
				out = append(out, c)
			}
		}
	}
	return out
}

// inCI reports whether some CI line runs cmd: its words appear in that
// line in order, starting at a word that is cmd's program (CI may add
// flags, such as a -timeout, or capture the output: out=$(gofmt -l .)).
func inCI(ci []string, cmd string) bool {
	want := strings.Fields(cmd)
	if len(want) == 0 {
		return false
	}
	for _, line := range ci {
		got := strings.Fields(line)
		for k, w := range got {
			if _, after, ok := strings.Cut(w, "$("); ok {
				w = after
			}
			if w != want[0] {
				continue
			}
			i := 1
			for _, g := range got[k+1:] {
				if i < len(want) && strings.TrimSuffix(g, ")") == want[i] {
					i++
				}
			}
			if i == len(want) {
				return true
			}
		}
	}
	return false
}

func TestBlocksParsesMarkersAndLanguages(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.md")
	os.WriteFile(p, []byte("text\n<!-- run -->\n```sh\necho hi\n```\n\n```\nplain\n```\n"), 0o644)
	bs, err := Blocks(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Lang != "sh" || bs[0].Marker != "run" || bs[0].Body != "echo hi\n" || bs[0].Line != 3 || bs[1].Lang != "" || bs[1].Marker != "" {
		t.Fatalf("blocks: %+v", bs)
	}
	if !inCI([]string{"go test -race -timeout 30m ./..."}, "go test -race ./...") || inCI([]string{"echo go"}, "go test") || !inCI([]string{"x=$(gofmt -l .)"}, "gofmt -l .") {
		t.Fatal("inCI")
	}
	if got := commands("a && b # c\n# d\ne\n"); !bytes.Equal([]byte(strings.Join(got, "|")), []byte("a|b|e")) {
		t.Fatalf("commands: %q", got)
	}
}
