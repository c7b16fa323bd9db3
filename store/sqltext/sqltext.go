// Package sqltext is a small lexer for ClickHouse SQL: enough to split peertrail's own schema
// into statements (the store's migrations) and to find the trailing FORMAT clause of a query,
// for the label of its answer (the SQL front). It guards nothing: what an untrusted query may
// do is decided by the engine (see package sqlhttp).
package sqltext

import (
	"errors"
	"strings"
	"unicode"
)

type tokenKind int

const (
	tokWord   tokenKind = iota // keyword or bare identifier
	tokQuoted                  // "identifier" or `identifier`
	tokString                  // 'string'
	tokNumber
	tokSemicolon
	tokOpen  // (
	tokClose // )
	tokOther // any other punctuation
)

type token struct {
	kind       tokenKind
	text       string
	start, end int // byte offsets in the input
}

var errUnterminated = errors.New("unterminated string, quoted identifier or comment")

// lexSQL returns the tokens of s, comments and whitespace dropped.
func lexSQL(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-',
			// ClickHouse takes '#' as a comment only before a space or '!'.
			c == '#' && i+1 < len(s) && (s[i+1] == ' ' || s[i+1] == '!'):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				i = len(s)
			} else {
				i += j + 1
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			// Not nested on purpose: if ClickHouse nests, text we take for code after the
			// first */ is comment to it, which errs on the side of refusing.
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return toks, errUnterminated
			}
			i += 2 + j + 2
		case c == '\'' || c == '"' || c == '`':
			j, ok := quotedEnd(s, i)
			if !ok {
				return toks, errUnterminated
			}
			kind := tokQuoted
			if c == '\'' {
				kind = tokString
			}
			toks = append(toks, token{kind, s[i:j], i, j})
			i = j
		case c == ';':
			toks = append(toks, token{tokSemicolon, ";", i, i + 1})
			i++
		case c == '(':
			toks = append(toks, token{tokOpen, "(", i, i + 1})
			i++
		case c == ')':
			toks = append(toks, token{tokClose, ")", i, i + 1})
			i++
		case isWordStart(c):
			j := i + 1
			for j < len(s) && isWordPart(s[j]) {
				j++
			}
			toks = append(toks, token{tokWord, s[i:j], i, j})
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < len(s) && (isWordPart(s[j]) || s[j] == '.') {
				j++
			}
			toks = append(toks, token{tokNumber, s[i:j], i, j})
			i = j
		default:
			toks = append(toks, token{tokOther, s[i : i+1], i, i + 1})
			i++
		}
	}
	return toks, nil
}

// quotedEnd returns the offset just past the quoted token starting at s[i], honouring
// backslash escapes and doubled quotes.
func quotedEnd(s string, i int) (int, bool) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j + 1, true
		}
	}
	return 0, false
}

func isWordStart(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || unicode.IsLetter(rune(c))
}

func isWordPart(c byte) bool {
	return isWordStart(c) || (c >= '0' && c <= '9')
}

// SplitStatements splits SQL text into statements at top-level semicolons, dropping empty
// ones (and ones that are only comments).
func SplitStatements(s string) ([]string, error) {
	toks, err := lexSQL(s)
	if err != nil {
		return nil, err
	}
	var out []string
	start, n := 0, 0
	flush := func(end int) {
		if n > 0 {
			out = append(out, strings.TrimSpace(s[start:end]))
		}
		n = 0
	}
	for _, t := range toks {
		if t.kind == tokSemicolon {
			flush(t.start)
			start = t.end
			continue
		}
		if n == 0 {
			start = t.start
		}
		n++
	}
	flush(len(s))
	return out, nil
}

// FormatClause returns the format of s's top-level trailing FORMAT clause ("" when there is
// none), so that the HTTP interface can label its answer. It decides nothing about what runs:
// the engine's parser and a read-only connection do that.
func FormatClause(s string) string {
	toks, err := lexSQL(s)
	if err != nil {
		return ""
	}
	if n := len(toks); n > 0 && toks[n-1].kind == tokSemicolon {
		toks = toks[:n-1]
	}
	depth := 0
	format := ""
	for i, t := range toks {
		switch t.kind {
		case tokOpen:
			depth++
		case tokClose:
			depth--
		case tokWord:
			// FORMAT <name> at the top level, followed by nothing or by SETTINGS.
			if depth == 0 && strings.EqualFold(t.text, "FORMAT") && i+1 < len(toks) &&
				(toks[i+1].kind == tokWord || toks[i+1].kind == tokQuoted) &&
				(i+2 == len(toks) || strings.EqualFold(toks[i+2].text, "SETTINGS")) {
				format = strings.Trim(toks[i+1].text, "`\"")
			}
		}
	}
	return format
}
