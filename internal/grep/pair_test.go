package grep

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
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

// hostilePairTexts are texts where a literal's pair of rare bytes is at
// almost every position and the literal nowhere, or once at the end
// (found in review: periodic data made the pair scanner 15-27 times
// slower than the scanner of one byte, which switches to bytes.Index).
func hostilePairTexts() []struct {
	name, pattern string
	text          []byte
} {
	return []struct {
		name, pattern string
		text          []byte
	}{
		{"same-byte-pair", "q" + strings.Repeat("z", 30) + "q", bytes.Repeat([]byte("q"), 8<<20)},
		{"zq-period", "zqzqzqzqX", bytes.Repeat([]byte("zq"), 4<<20)},
		{"zq-64", strings.Repeat("zq", 31) + "zX", bytes.Repeat([]byte("zq"), 4<<20)},
	}
}

// On the hostile texts the literal is found exactly where it is: nowhere,
// at the end of the text, and in a line of its own after them.
func TestPairScannerOnPeriodicText(t *testing.T) {
	for _, c := range hostilePairTexts() {
		m, err := Compile(c.pattern, false)
		if err != nil {
			t.Fatal(err)
		}
		text := c.text[:1<<20]
		for _, tail := range []string{"", c.pattern, "\n" + c.pattern + "\n"} {
			data := append(append([]byte{}, text...), tail...)
			var got [][2]int
			if err := m.EachLine(t.Context(), data, func(s, e int) bool { got = append(got, [2]int{s, e}); return true }); err != nil {
				t.Fatal(err)
			}
			var want [][2]int
			if i := bytes.Index(data, []byte(c.pattern)); i >= 0 {
				s := bytes.LastIndexByte(data[:i], '\n') + 1
				e := len(data)
				if j := bytes.IndexByte(data[i:], '\n'); j >= 0 {
					e = i + j
				}
				want = append(want, [2]int{s, e})
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s with %q after it: lines %v, want %v", c.name, tail, got, want)
			}
		}
	}
}

// BenchmarkPairHostile is the search of a literal over the hostile texts
// against bytes.Index of it over the same text (the floor: the search has
// nothing else to do there), in the same run: x-index is their ratio. The
// review measured 15-27x before the scanner of a pair fell back to
// bytes.Index on text where its pair is common.
func BenchmarkPairHostile(b *testing.B) {
	for _, c := range hostilePairTexts() {
		m, err := Compile(c.pattern, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.text)))
			var subject, floor time.Duration
			for range b.N {
				t0 := time.Now()
				_ = m.EachLine(b.Context(), c.text, func(int, int) bool { return true })
				t1 := time.Now()
				_ = bytes.Index(c.text, []byte(c.pattern))
				subject, floor = subject+t1.Sub(t0), floor+time.Since(t1)
			}
			b.ReportMetric(float64(subject)/float64(floor), "x-index")
		})
	}
}
