package store

import (
	"errors"
	"testing"
)

func TestAnalyzeReadQuery(t *testing.T) {
	for _, c := range []struct {
		sql      string
		ok       bool
		readonly bool // refused as a write (else as a syntax error) when !ok
		format   string
		insert   string // text after settingsEnd insertion of "|"
	}{
		{sql: "SELECT 1", ok: true},
		{sql: "  select 1 ;  ", ok: true},
		{sql: "WITH 1 AS x SELECT x", ok: true},
		{sql: "(SELECT 1) UNION ALL (SELECT 2)", ok: true},
		{sql: "SHOW TABLES", ok: true},
		{sql: "DESC peertrail.events", ok: true},
		{sql: "EXISTS TABLE peertrail.events", ok: true},
		{sql: "-- comment\nSELECT 1", ok: true},
		{sql: "/* x */ SELECT ';'", ok: true},
		{sql: "SELECT 1 FORMAT JSON", ok: true, format: "JSON"},
		{sql: "SELECT 1 FORMAT `JSONEachRow` SETTINGS max_threads = 1", ok: true, format: "JSONEachRow", insert: "SELECT 1 FORMAT `JSONEachRow` SETTINGS max_threads = 1|"},
		{sql: "SELECT 1 SETTINGS max_threads = 1 FORMAT CSV", ok: true, format: "CSV", insert: "SELECT 1 SETTINGS max_threads = 1| FORMAT CSV"},
		{sql: "SELECT format FROM t", ok: true},
		{sql: "SELECT * FROM (SELECT 1 SETTINGS max_threads = 1)", ok: true},
		{sql: "SELECT 'it''s', 'a\\'b', \"q\"\"x\", `b``t`", ok: true},
		{sql: "INSERT INTO t VALUES (1)", readonly: true},
		{sql: "insert into t values (1)", readonly: true},
		{sql: "DROP TABLE t", readonly: true},
		{sql: "SET readonly = 0", readonly: true},
		{sql: "SYSTEM SHUTDOWN", readonly: true},
		{sql: "SELEC 1"},
		{sql: ""},
		{sql: "  ;  "},
		{sql: "SELECT 1; DROP TABLE t"},
		{sql: "SELECT 1; SELECT 2"},
		{sql: "SELECT 'unterminated"},
		{sql: "SELECT 1 /* unterminated"},
		{sql: "SELECT \"x"},
		{sql: "SELECT 1 INTO OUTFILE 'x'"},
		{sql: "SELECT '--' ; DROP TABLE t"},
		{sql: "SELECT $$; DROP TABLE t; $$"},
		{sql: "#!x\nSELECT 1", ok: true},
	} {
		q, err := analyzeReadQuery(c.sql)
		if c.ok != (err == nil) {
			t.Errorf("%q: error %v, want ok=%v", c.sql, err, c.ok)
			continue
		}
		if !c.ok {
			if c.readonly != errors.Is(err, ErrReadOnly) {
				t.Errorf("%q: error %v, want read-only refusal %v", c.sql, err, c.readonly)
			}
			continue
		}
		if q.format != c.format {
			t.Errorf("%q: format %q, want %q", c.sql, q.format, c.format)
		}
		if c.insert != "" {
			if q.settingsEnd < 0 {
				t.Errorf("%q: no SETTINGS clause found", c.sql)
			} else if got := q.text[:q.settingsEnd] + "|" + q.text[q.settingsEnd:]; got != c.insert {
				t.Errorf("%q: settings end at %q, want %q", c.sql, got, c.insert)
			}
		} else if q.settingsEnd >= 0 {
			t.Errorf("%q: found a SETTINGS clause ending at %d", c.sql, q.settingsEnd)
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

func TestTypeArgs(t *testing.T) {
	name, args := typeArgs("Map(LowCardinality(String), Array(Tuple(a String, b DateTime64(6, 'UTC'))))")
	if name != "Map" || len(args) != 2 || args[0] != "LowCardinality(String)" || args[1] != "Array(Tuple(a String, b DateTime64(6, 'UTC')))" {
		t.Fatalf("%q %q", name, args)
	}
}
