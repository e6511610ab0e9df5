package grep

import (
	"math/rand/v2"
	"testing"
)

func indexPairNaive(s []byte, c1, c2 byte, d int) int {
	for i := 0; i+d < len(s); i++ {
		if s[i] == c1 && s[i+d] == c2 {
			return i
		}
	}
	return -1
}

// indexPair (AVX2 where the CPU has it) agrees with the definition for
// every length around the vector steps (32, 64 positions), every distance
// up to a literal's length, pairs at the first and last positions and
// none, over bytes drawn from a small alphabet so that both halves of a
// pair hit often on their own. The bytes after the slice (in its backing
// array) are the pair's, so a read past its end shows as a wrong answer.
func TestIndexPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := make([]byte, 300+64)
	for n := 0; n <= 300; n++ {
		for _, d := range []int{0, 1, 2, 7, 31, 32, 33, 63} {
			for trial := range 20 {
				b := s[:n:n]
				for i := n; i < len(s); i++ {
					s[i] = "ab"[trial%2] // c1, or the second of a pair
				}
				for i := range b {
					b[i] = "abcx"[rng.IntN(4)]
				}
				if trial%5 == 0 && n > 0 {
					for i := range b {
						b[i] = 'a' // c1 everywhere, c2 nowhere or at one end
					}
					if trial%10 == 0 {
						b[n-1] = 'x'
					}
				}
				c1, c2 := byte('a'), byte("abx"[trial%3])
				switch trial {
				case 18: // no c1 inside; after the end, pairs everywhere
					for i := range b {
						b[i] = 'x'
					}
					c2 = 'a'
					for i := n; i < len(s); i++ {
						s[i] = 'a'
					}
				case 19: // c1 everywhere inside; after the end, c2
					for i := range b {
						b[i] = 'a'
					}
					c2 = 'b'
					for i := n; i < len(s); i++ {
						s[i] = 'b'
					}
				}
				want := indexPairNaive(b, c1, c2, d)
				if got := indexPair(b, c1, c2, d); got != want {
					t.Fatalf("indexPair(%q, %q, %q, %d) = %d, want %d", b, c1, c2, d, got, want)
				}
				if got := indexPairGeneric(b, c1, c2, d); got != want {
					t.Fatalf("indexPairGeneric(%q, %q, %q, %d) = %d, want %d", b, c1, c2, d, got, want)
				}
			}
		}
	}
}

func FuzzIndexPair(f *testing.F) {
	f.Add([]byte("func NewReader(r io.Reader) *Reader {"), byte('N'), byte('w'), 2)
	f.Fuzz(func(t *testing.T, s []byte, c1, c2 byte, d int) {
		if d < 0 || d > 64 {
			return
		}
		if got, want := indexPair(s, c1, c2, d), indexPairNaive(s, c1, c2, d); got != want {
			t.Fatalf("indexPair(%q, %q, %q, %d) = %d, want %d", s, c1, c2, d, got, want)
		}
	})
}
