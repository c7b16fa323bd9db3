package sqltext

import (
	"testing"
)

// FormatClause only labels an answer; the engine decides what runs (see the attack tests).
func TestFormatClause(t *testing.T) {
	for _, c := range []struct{ sql, format string }{
		{"SELECT 1", ""},
		{"SELECT 1 FORMAT JSON", "JSON"},
		{"SELECT 1 FORMAT JSON;", "JSON"},
		{"SELECT 1 FORMAT `JSONEachRow` SETTINGS max_threads = 1", "JSONEachRow"},
		{"SELECT 1 SETTINGS max_threads = 1 FORMAT CSV", "CSV"},
		{"SELECT format FROM t", ""},
		{"SELECT * FROM (SELECT 1 FORMAT CSV)", ""},
		{"SELECT 'FORMAT CSV'", ""},
		{"SELECT 1 -- FORMAT CSV", ""},
		{"SELECT 'unterminated FORMAT CSV", ""},
	} {
		if got := FormatClause(c.sql); got != c.format {
			t.Errorf("FormatClause(%q) = %q, want %q", c.sql, got, c.format)
		}
	}
}

func TestSplitStatements(t *testing.T) {
	got, err := SplitStatements("-- head\nCREATE TABLE a (s String DEFAULT ';');\n\n;  -- only a comment\nSELECT 2\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "CREATE TABLE a (s String DEFAULT ';')" || got[1] != "SELECT 2" {
		t.Fatalf("%q", got)
	}
}
