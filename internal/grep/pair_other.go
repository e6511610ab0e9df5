//go:build !amd64

package grep

// indexPair returns the first i with s[i] == c1 and s[i+d] == c2, or -1.
func indexPair(s []byte, c1, c2 byte, d int) int { return indexPairGeneric(s, c1, c2, d) }
