package jsonscan

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// The byte-at-a-time definitions the word-at-a-time functions must match.
func refPlain(b []byte) int {
	for i, c := range b {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return i
		}
	}
	return len(b)
}

func refPlainHTML(b []byte) int {
	for i, c := range b {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return i
		}
	}
	return len(b)
}

func refQuoteOrBackslash(b []byte) int {
	for i, c := range b {
		if c == '"' || c == '\\' {
			return i
		}
	}
	return len(b)
}

// check compares all three functions, on b as bytes and as a string, with
// their definitions.
func check(t *testing.T, b []byte) {
	t.Helper()
	s := string(b)
	for _, f := range []struct {
		name      string
		want      int
		got, gotS int
	}{
		{"Plain", refPlain(b), Plain(b), Plain(s)},
		{"PlainHTML", refPlainHTML(b), PlainHTML(b), PlainHTML(s)},
		{"QuoteOrBackslash", refQuoteOrBackslash(b), QuoteOrBackslash(b), QuoteOrBackslash(s)},
	} {
		if f.got != f.want || f.gotS != f.want {
			t.Fatalf("%s(%q) = %d ([]byte), %d (string), want %d", f.name, b, f.got, f.gotS, f.want)
		}
	}
}

// Every byte value at every position of two words, alone among plain bytes
// and with a second byte after it: the second can never hide or move the
// first, whatever borrow it causes.
func TestEveryByteAtEveryPosition(t *testing.T) {
	for n := 0; n <= 17; n++ {
		check(t, []byte(strings.Repeat("a", n)))
	}
	for pos := range 16 {
		for c := range 256 {
			b := []byte(strings.Repeat("m", 17))
			b[pos] = byte(c)
			check(t, b)
			for next := pos + 1; next < len(b); next++ {
				for d := range 256 {
					b2 := append([]byte(nil), b...)
					b2[next] = byte(d)
					check(t, b2)
				}
			}
		}
	}
}

// Random text of random length, weighted towards the bytes that matter.
func TestRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("abc \"\\<>&\x00\x1f\x7f\x80\xc3\xff")
	for range 200000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(8) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = byte(0x20 + r.IntN(0x5f))
			}
		}
		check(t, b)
	}
}

func FuzzScan(f *testing.F) {
	f.Add([]byte(`campaign=winter-sale;batch=7"`))
	f.Add([]byte("\x00\"\\<>&\x80"))
	f.Fuzz(func(t *testing.T, b []byte) { check(t, b) })
}
