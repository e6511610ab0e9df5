package grep

import "bytes"

// indexPairGeneric is indexPair without vector instructions: c1 found with
// bytes.IndexByte, c2 looked at d bytes further.
func indexPairGeneric(s []byte, c1, c2 byte, d int) int {
	n := len(s) - d
	for i := 0; i < n; i++ {
		j := bytes.IndexByte(s[i:n], c1)
		if j < 0 {
			return -1
		}
		if i += j; s[i+d] == c2 {
			return i
		}
	}
	return -1
}
