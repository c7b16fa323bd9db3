package store

import (
	"errors"
	"strings"
	"unicode"
)

// A small lexer for ClickHouse SQL: enough to split statements, find the first keyword, a
// trailing FORMAT clause and INTO OUTFILE, without being fooled by strings, quoted identifiers
// and comments. Where it cannot be sure (an unterminated string or comment) it says so, and
// the HTTP interface refuses the query: the lexer guards what a read-only endpoint lets
// through, so doubt means no.

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

// readQuery is what the HTTP interface needs to know about a query.
type readQuery struct {
	// keyword is the statement's first keyword, upper case.
	keyword string
	// format is the FORMAT clause's format, "" if none.
	format string
	// text is the statement without a trailing semicolon.
	text string
	// settingsEnd is the offset in text just after the trailing top-level SETTINGS clause,
	// where more settings can be added (", name = value"); -1 when there is none.
	settingsEnd int
}

// readKeywords are the statements the read-only HTTP interface runs.
var readKeywords = map[string]bool{
	"SELECT": true, "WITH": true, "SHOW": true, "DESC": true, "DESCRIBE": true, "EXISTS": true, "EXPLAIN": true,
}

// writeKeywords are statements that change something: refused as such (other words are
// syntax errors, as a server would call them).
var writeKeywords = map[string]bool{
	"INSERT": true, "CREATE": true, "DROP": true, "ALTER": true, "TRUNCATE": true, "RENAME": true,
	"OPTIMIZE": true, "SYSTEM": true, "KILL": true, "SET": true, "USE": true, "GRANT": true,
	"REVOKE": true, "DETACH": true, "ATTACH": true, "DELETE": true, "UPDATE": true, "EXCHANGE": true,
	"UNDROP": true, "BACKUP": true, "RESTORE": true, "MOVE": true, "CHECK": true, "WATCH": true, "REPLACE": true,
}

// errSyntax: the statement does not start like any ClickHouse statement.
var errSyntax = errors.New("syntax error: not a statement this interface runs")

// analyzeReadQuery checks that s is exactly one read statement and returns what the HTTP
// interface needs to know about it; the error says why it is refused.
func analyzeReadQuery(s string) (readQuery, error) {
	toks, err := lexSQL(s)
	if err != nil {
		return readQuery{}, err
	}
	// One statement: a semicolon may only end it.
	for i, t := range toks {
		if t.kind == tokSemicolon && i != len(toks)-1 {
			return readQuery{}, errors.New("multi-statements are not allowed")
		}
	}
	if n := len(toks); n > 0 && toks[n-1].kind == tokSemicolon {
		s = s[:toks[n-1].start]
		toks = toks[:n-1]
	}
	if len(toks) == 0 {
		return readQuery{}, errors.New("empty query")
	}
	q := readQuery{text: s, settingsEnd: -1}
	first := 0
	for first < len(toks) && toks[first].kind == tokOpen {
		first++ // (SELECT ...) UNION ...
	}
	if first == len(toks) || toks[first].kind != tokWord {
		return readQuery{}, ErrReadOnly
	}
	q.keyword = strings.ToUpper(toks[first].text)
	if !readKeywords[q.keyword] {
		if writeKeywords[q.keyword] {
			return readQuery{}, ErrReadOnly
		}
		return readQuery{}, errSyntax
	}
	depth := 0
	settingsAt, formatAt := -1, -1
	for i, t := range toks {
		switch t.kind {
		case tokOpen:
			depth++
		case tokClose:
			depth--
		case tokWord:
			w := strings.ToUpper(t.text)
			if w == "OUTFILE" && i > 0 && strings.EqualFold(toks[i-1].text, "INTO") {
				return readQuery{}, errors.New("INTO OUTFILE is not allowed")
			}
			if depth != 0 {
				continue
			}
			// FORMAT <name> at the top level, followed by nothing or by SETTINGS.
			if w == "FORMAT" && i+1 < len(toks) && (toks[i+1].kind == tokWord || toks[i+1].kind == tokQuoted) &&
				(i+2 == len(toks) || strings.EqualFold(toks[i+2].text, "SETTINGS")) {
				q.format = strings.Trim(toks[i+1].text, "`\"")
				formatAt = i
			}
			// SETTINGS name = ...
			if w == "SETTINGS" && i+2 < len(toks) && toks[i+1].kind == tokWord && toks[i+2].text == "=" {
				settingsAt = i
			}
		}
	}
	if settingsAt >= 0 {
		// The clause runs to the end, or to a FORMAT clause that follows it.
		end := len(toks) - 1
		if formatAt > settingsAt {
			end = formatAt - 1
		}
		q.settingsEnd = toks[end].end
	}
	return q, nil
}
