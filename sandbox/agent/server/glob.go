package server

import (
	"path"
	"strings"
)

// globMatch reports whether rel, a slash-separated path relative to a search
// root, matches pattern with the semantics of the fs.glob and fs.search
// requests: a pattern without "/" matches the base name (like find -name); a
// pattern with "/" matches the whole relative path, where a "**" segment
// matches any number of directories. A malformed pattern matches nothing.
func globMatch(pattern, rel string) bool {
	if !strings.Contains(pattern, "/") {
		ok, _ := path.Match(pattern, path.Base(rel))
		return ok
	}
	return matchSegments(strings.Split(pattern, "/"), strings.Split(rel, "/"))
}

// matchSegments matches path segments against pattern segments. It runs in
// O(len(pat)·len(name)) path.Match calls: patterns come from the model, and
// the naive recursion over "**" is exponential in the number of "**"
// segments (e.g. "**/**/**/**/x" against a deep tree).
func matchSegments(pat, name []string) bool {
	// next[j] reports whether pat[i+1:] matches name[j:]; cur is the row for pat[i:].
	next := make([]bool, len(name)+1)
	cur := make([]bool, len(name)+1)
	next[len(name)] = true // the empty pattern matches only the empty path
	for i := len(pat) - 1; i >= 0; i-- {
		for j := len(name); j >= 0; j-- {
			switch {
			case pat[i] == "**":
				// Match zero segments, or one more and stay on "**".
				cur[j] = next[j] || (j < len(name) && cur[j+1])
			case j == len(name):
				cur[j] = false
			default:
				ok, _ := path.Match(pat[i], name[j])
				cur[j] = ok && next[j+1]
			}
		}
		next, cur = cur, next
	}
	return next[0]
}
