// Package termsafe makes text that came from an audit event (a name, a path, a user agent, an
// auditID: all chosen by whoever made the request) safe to print on an operator's terminal.
//
// String keeps a rune only when it is valid UTF-8 and graphic (strconv.IsGraphic: letters,
// marks, numbers, punctuation, symbols and spaces) and writes everything else as the escape Go
// quoting uses: C0 controls and DEL as \t, \n, \r or \xHH (ESC is \x1b), C1 controls and the
// other non-graphic runes as \uHHHH (CSI U+009B is \u009b; the bidi controls U+061C, U+200E,
// U+200F, U+202A-U+202E and U+2066-U+2069 are format characters, so \u202e), and a byte that is
// not UTF-8 as \xHH. kubectl's printers.EscapeTerminal (k8s.io/cli-runtime) replaces only ESC
// and CR, which leaves the single-character CSI and the bidi overrides through, so it is
// extended here rather than used.
//
// Only what is printed for reading is escaped: tab and newline between fields are the
// writer's own, and json and yaml output, which escape controls themselves, stay exact.
package termsafe

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// String returns s with every rune a terminal could act on, and every byte that is not UTF-8,
// written as an escape; s itself when it needs none.
func String(s string) string {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < 0x7f {
		i++
	}
	if i == len(s) {
		return s
	}
	if Safe(s[i:]) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&0xf])
		case !strconv.IsGraphic(r):
			if r > 0xffff {
				b.WriteString(`\U`)
				writeHex(&b, r, 8)
			} else {
				b.WriteString(`\u`)
				writeHex(&b, r, 4)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Safe reports whether String would return s unchanged.
func Safe(s string) bool {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !strconv.IsGraphic(r) {
			return false
		}
		i += n
	}
	return true
}

func writeHex(b *strings.Builder, r rune, digits int) {
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hex[(r>>shift)&0xf])
	}
}
