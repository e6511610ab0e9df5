// Package rgtest serves the search benchmarks: it asks ripgrep which
// lines a pattern matches, so a benchmark can check that the search it
// times finds exactly those (a faster search that finds fewer lines would
// be no win). It is for tests only.
package rgtest

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Lines runs ripgrep (the program rg) for pattern over root, reading
// hidden and ignored files too, as sandboxkit's search does, and returns
// the matching lines as sorted "path:line" entries, paths relative to
// root.
func Lines(rg, root, pattern string, fold bool) ([]string, error) {
	args := []string{"-n", "--hidden", "--no-ignore", "--no-heading", "--with-filename"}
	if fold {
		args = append(args, "-i")
	}
	out, err := exec.Command(rg, append(args, pattern, root)...).Output()
	if err != nil {
		return nil, fmt.Errorf("rg: %w", err)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) < 3 {
			return nil, fmt.Errorf("rg printed %q", line)
		}
		lines = append(lines, strings.TrimPrefix(f[0], root+"/")+":"+f[1])
	}
	slices.Sort(lines)
	return lines, nil
}

// Entry is a search result's line as Lines names it.
func Entry(path string, line int) string { return path + ":" + strconv.Itoa(line) }
