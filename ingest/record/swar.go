package record

import (
	"encoding/binary"
	"math/bits"
)

// The scanner spends most of its time inside strings: an event is mostly keys and values of
// a few to a hundred plain ASCII bytes. These find the next byte that matters eight bytes at a
// time (bit tricks on a 64-bit word) instead of one by one. Each flags, in a word, the bytes
// that matter with their top bit; a borrow can flag a byte wrongly only above one rightly
// flagged, so the lowest flag is always exact, and it is the only one read.

const (
	lows  = 0x0101010101010101
	highs = 0x8080808080808080
)

// zeroBytes flags the bytes of x that are zero.
func zeroBytes(x uint64) uint64 { return (x - lows) & ^x & highs }

// stringStop returns the index of the first byte of b at or after i that is a quote, a
// backslash, a control character (< 0x20) or not ASCII (>= 0x80): where a plain ASCII run of
// a JSON string ends. It returns len(b) if there is none.
func stringStop(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		m := zeroBytes(x^(lows*'"')) | zeroBytes(x^(lows*'\\')) | (x-lows*0x20)&^x&highs | x&highs
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return i
		}
	}
	return len(b)
}

// quoteOrEscape returns the index of the first quote or backslash in b at or after i, or
// len(b) if there is none.
func quoteOrEscape(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := zeroBytes(x^(lows*'"')) | zeroBytes(x^(lows*'\\')); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' {
			return i
		}
	}
	return len(b)
}
