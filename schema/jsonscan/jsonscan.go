// Package jsonscan finds the next byte that matters in JSON text eight bytes
// at a time. wahook's JSON loops (schema/meta's decoder of Meta's bodies,
// the event encoder and stage 2's reader of events) spend most of their
// time passing over the inside of strings, most of all the callback data
// senders attach to messages (up to 512 characters); these functions let them
// skip the bytes that need no thought a word at a time instead of a byte at
// a time.
//
// Each function returns the index of the first byte of its class, or the
// length of the input if there is none. A byte is found exactly, with no
// false hits: the word tests can only misfire in bytes above a real hit, and
// only the lowest hit of a word is used.
package jsonscan

import "math/bits"

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// word reads b[i:i+8] as a little-endian word (the compiler turns this into
// one load).
func word[T ~string | ~[]byte](b T, i int) uint64 {
	w := b[i : i+8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// is marks (with its high bit) each byte of x equal to c. Only the lowest
// mark is exact (see the package comment), and the bytes' low bits are left
// set at random: callers keep only the high bits (& highs).
func is(x uint64, c byte) uint64 {
	y := x ^ (ones * uint64(c))
	return (y - ones) &^ y
}

// special marks the bytes that a JSON string cannot hold as themselves or
// that need a closer look: '"', '\\', control characters (below 0x20) and
// bytes outside ASCII. Only the lowest mark is exact.
func special(x uint64) uint64 {
	return ((x - ones*0x20) | x | is(x, '"') | is(x, '\\')) & highs
}

// specialHTML is special and '<', '>' and '&'.
func specialHTML(x uint64) uint64 {
	return special(x) | (is(x, '<')|is(x, '>')|is(x, '&'))&highs
}

// quoteOrBackslash marks '"' and '\\'.
func quoteOrBackslash(x uint64) uint64 {
	return (is(x, '"') | is(x, '\\')) & highs
}

// The three functions below are one loop each, not one loop taking its
// marks as a function value: Go does not inline a function passed that way,
// and the call per word made the scan half again as slow. The last bytes,
// fewer than a word, are tested one at a time by the same marks, their
// lowest byte's only (a byte alone in a word is marked exactly there; the
// zero bytes above it may be marked too), so each class is written once.

// Plain returns the index of the first byte of b that is outside 0x20-0x7F
// or is '"' or '\\': where a JSON string's run of bytes that stand for
// themselves ends.
func Plain[T ~string | ~[]byte](b T) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if m := special(word(b, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b) && special(uint64(b[i]))&0x80 == 0; i++ {
	}
	return i
}

// PlainHTML is Plain that also stops at '<', '>' and '&', the bytes
// encoding/json escapes by default.
func PlainHTML[T ~string | ~[]byte](b T) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if m := specialHTML(word(b, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b) && specialHTML(uint64(b[i]))&0x80 == 0; i++ {
	}
	return i
}

// QuoteOrBackslash returns the index of the first '"' or '\\' in b.
func QuoteOrBackslash[T ~string | ~[]byte](b T) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if m := quoteOrBackslash(word(b, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b) && quoteOrBackslash(uint64(b[i]))&0x80 == 0; i++ {
	}
	return i
}
