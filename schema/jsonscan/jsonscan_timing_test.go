package jsonscan

import (
	"strings"
	"testing"
)

// BenchmarkPlain passes over a callback-data-sized string (Meta allows 512
// characters) to its closing quote, word at a time against byte at a time.
func BenchmarkPlain(b *testing.B) {
	s := []byte(strings.Repeat("campaign=winter-sale;batch=07;", 14) + `"`)
	b.SetBytes(int64(len(s)))
	b.Run("words", func(b *testing.B) {
		for b.Loop() {
			if Plain(s) != len(s)-1 {
				b.Fatal("wrong end")
			}
		}
	})
	b.Run("bytes", func(b *testing.B) {
		for b.Loop() {
			if refPlain(s) != len(s)-1 {
				b.Fatal("wrong end")
			}
		}
	})
}
