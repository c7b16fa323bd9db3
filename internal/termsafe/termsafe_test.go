package termsafe

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"kube-apiserver/v1.36.3 (linux/amd64)", "kube-apiserver/v1.36.3 (linux/amd64)"},
		{"héllo wörld ☃ 日本", "héllo wörld ☃ 日本"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"\x1b]0;title\x07", `\x1b]0;title\x07`},
		{"line\r\nnext\tcol", `line\r\nnext\tcol`},
		{"\x00\x7f", `\x00\x7f`},
		{"csi\u009b31m", `csi\u009b31m`},
		{"\u0080\u0085\u009f", `\u0080\u0085\u009f`},
		{"evil\u202egpj.exe", `evil\u202egpj.exe`},
		{"\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069",
			`\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`},
		{"tag\U000e0041", `tag\U000e0041`},
		{"bad\xffutf8\xc2", `bad\xffutf8\xc2`},
		{"\xe2\x80", `\xe2\x80`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
		if Safe(c.in) != (c.in == c.want) {
			t.Errorf("Safe(%q) = %v, but String changes it: %v", c.in, Safe(c.in), c.in != c.want)
		}
	}
}

// Every rune the issue names, and every control, comes out as printable ASCII.
func TestEveryControlEscaped(t *testing.T) {
	var bad []rune
	for r := rune(0); r < 0x20; r++ {
		bad = append(bad, r)
	}
	for r := rune(0x7f); r <= 0x9f; r++ {
		bad = append(bad, r)
	}
	bad = append(bad, 0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069, 0x2028, 0x2029, 0xfeff)
	for _, r := range bad {
		out := String("x" + string(r) + "y")
		if strings.ContainsRune(out, r) || !printableASCII(out) {
			t.Errorf("U+%04X printed as %q", r, out)
		}
	}
}

// Printing stays reversible: Go's own unquoting gives back the input, for every rune and for
// bytes that are not UTF-8 (input without quote or backslash, whose escaping is the format's).
func TestUnquoteRoundTrip(t *testing.T) {
	var b strings.Builder
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r == '"' || r == '\\' || (r >= 0xd800 && r <= 0xdfff) {
			continue
		}
		b.WriteRune(r)
		if r%64 == 0 {
			checkRoundTrip(t, b.String())
			b.Reset()
		}
	}
	checkRoundTrip(t, b.String())
	checkRoundTrip(t, "\xff\xfe\xc0\x80\xed\xa0\x80")
}

func checkRoundTrip(t *testing.T, s string) {
	t.Helper()
	out := String(s)
	back, err := strconv.Unquote(`"` + out + `"`)
	if err != nil || back != s {
		t.Fatalf("String(%q) = %q, unquotes to %q (%v)", s, out, back, err)
	}
	for _, r := range out {
		if !strconv.IsGraphic(r) {
			t.Fatalf("String(%q) = %q keeps U+%04X", s, out, r)
		}
	}
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x1b[31mb", "\u009b\u202e", "\xff", "日本\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		if Safe(s) != (out == s) {
			t.Fatalf("Safe(%q) = %v, String = %q", s, Safe(s), out)
		}
		if !Safe(out) || !utf8.ValidString(out) {
			t.Fatalf("String(%q) = %q is not safe", s, out)
		}
		if !strings.ContainsAny(s, `"\`) {
			checkRoundTrip(t, s)
		}
	})
}

func BenchmarkStringPlain(b *testing.B) {
	s := "kube-apiserver/v1.36.3 (linux/amd64) kubernetes/abcdef0"
	for b.Loop() {
		String(s)
	}
}
