package record

import "testing"

// naiveStop and naiveQuote are stringStop and quoteOrEscape a byte at a time.
func naiveStop(b []byte, i int) int {
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return i
		}
	}
	return len(b)
}

func naiveQuote(b []byte, i int) int {
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' {
			return i
		}
	}
	return len(b)
}

// TestStringStopEveryByte puts each of the 256 bytes at each place of a run of plain bytes
// (the word-at-a-time reading has a case per place in a word, and borrows between places),
// after each byte that could borrow, and checks both finders against the byte-at-a-time ones.
func TestStringStopEveryByte(t *testing.T) {
	for n := range 20 {
		for at := range n {
			for c := range 256 {
				for _, before := range []byte{'a', 0x00, 0x01, 0x1f, 0x20, 0x21, '"' + 1, '\\' + 1, 0x7f} {
					b := make([]byte, n)
					for i := range b {
						b[i] = 'a'
					}
					if at > 0 {
						b[at-1] = before
					}
					b[at] = byte(c)
					for from := 0; from <= n; from++ {
						if got, want := stringStop(b, from), naiveStop(b, from); got != want {
							t.Fatalf("stringStop(%q, %d) = %d, want %d", b, from, got, want)
						}
						if got, want := quoteOrEscape(b, from), naiveQuote(b, from); got != want {
							t.Fatalf("quoteOrEscape(%q, %d) = %d, want %d", b, from, got, want)
						}
					}
				}
			}
		}
	}
}

func FuzzStringStop(f *testing.F) {
	f.Add([]byte(`{"a":"b\\\"c","d":"\u00e9"}`), 0)
	f.Add([]byte("plain ascii run of more than eight bytes\x01\x80\""), 3)
	f.Fuzz(func(t *testing.T, b []byte, from int) {
		if from < 0 || from > len(b) {
			return
		}
		if got, want := stringStop(b, from), naiveStop(b, from); got != want {
			t.Fatalf("stringStop(%q, %d) = %d, want %d", b, from, got, want)
		}
		if got, want := quoteOrEscape(b, from), naiveQuote(b, from); got != want {
			t.Fatalf("quoteOrEscape(%q, %d) = %d, want %d", b, from, got, want)
		}
	})
}
