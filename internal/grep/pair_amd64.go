package grep

import "golang.org/x/sys/cpu"

// hasAVX2 says indexPairAVX2 may run.
var hasAVX2 = cpu.X86.HasAVX2

//go:noescape
func indexPairAVX2(s []byte, c1, c2 byte, d int) int

// indexPair returns the first i with s[i] == c1 and s[i+d] == c2, or -1.
func indexPair(s []byte, c1, c2 byte, d int) int {
	if hasAVX2 && len(s)-d >= 32 {
		return indexPairAVX2(s, c1, c2, d)
	}
	return indexPairGeneric(s, c1, c2, d)
}
