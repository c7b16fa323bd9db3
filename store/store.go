// Package store keeps peertrail's audit records and chains in ClickHouse: the schema (versioned
// migrations of the `peertrail` database), the writer that moves records from the spool into the
// events table, the sink the correlator writes chains to, the canned investigation queries, and a
// read-only ClickHouse HTTP interface in front of the embedded engine.
//
// Two engines run the same schema and the same queries:
//
//   - Embedded (the default): the ClickHouse engine linked as a library (store/chdb), data under
//     peertrail's data directory. One per process.
//   - Server: a ClickHouse server, cluster or cloud service, through clickhouse-go (native
//     protocol by default, HTTP optional).
//
// Both implement Store, the small interface everything else in this package is written against.
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// Database is the ClickHouse database that holds every peertrail table.
const Database = "peertrail"

// Table names, database-qualified.
const (
	EventsTable = Database + ".events"
	ChainsTable = Database + ".chains"
)

// Store is one ClickHouse engine holding the peertrail database.
//
// Concurrency: a Store is safe for use by several goroutines at once. The embedded engine runs
// one statement at a time (callers queue, and a long query delays inserts); a server runs them
// in parallel.
//
// Lifecycle: an Open function returns a ready Store; Close releases it (the embedded engine
// flushes its state to disk), after which every method returns an error wrapping ErrClosed.
// A Store does not create or migrate the schema by itself: call Migrate once after opening.
//
// Ownership: Insert does not keep rows (or anything they reference) after it returns; the
// Result of Query belongs to the caller.
//
// Failures: an error from the engine itself is an *Error carrying ClickHouse's error code. An
// Insert that fails may still have written some or all of its rows (the server may have
// committed before the connection broke), so writers must be idempotent; see Writer.
type Store interface {
	// Exec runs one statement that returns no rows: DDL, ALTER, OPTIMIZE, SYSTEM.
	Exec(ctx context.Context, stmt string) error
	// Query runs one read statement (SELECT, WITH, SHOW, DESCRIBE, EXISTS) and returns its
	// whole result. Placeholders {name:Type} in query are bound by the engine from params,
	// given in ClickHouse's text form for Type, escaped as in TabSeparated (EscapeTSV: a
	// String value with a newline or backslash needs it); values never become part of the SQL
	// text. The statement must not carry a FORMAT clause.
	Query(ctx context.Context, query string, params map[string]string) (*Result, error)
	// Insert appends rows to table ("database.table"). Each row holds one Go value per column,
	// in the order of columns, of the type the column's ClickHouse type maps to (see
	// Column.Type). Materialized views attached to table see the rows as one insert.
	Insert(ctx context.Context, table string, columns []Column, rows [][]any) error
	// Close releases the engine or connection. Closing twice returns nil.
	Close() error
}

// Errors of this package. Match them with errors.Is.
var (
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrSchemaChanged: a migration that was already applied differs from the one in this
	// binary. Applied migrations are history and are never edited; add a new one instead.
	ErrSchemaChanged = errors.New("store: an applied schema migration differs from this binary's")
	// ErrSchemaTooNew: the database has migrations this binary does not know (it was written
	// by a newer peertrail). Upgrade peertrail rather than run an old writer against it.
	ErrSchemaTooNew = errors.New("store: the database schema is newer than this peertrail")
)

// Error is a failure reported by ClickHouse itself (either engine), with its error code.
type Error struct {
	// Op is what the store was doing: "query", "exec", "insert".
	Op string
	// Code is ClickHouse's error code (e.g. 60 UNKNOWN_TABLE, 62 SYNTAX_ERROR, 164 READONLY);
	// 0 when the message carried none.
	Code int
	// Name is the symbolic code (e.g. "UNKNOWN_TABLE") when the message carried it.
	Name string
	// Message is ClickHouse's text.
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("clickhouse %s: %s", e.Op, e.Message)
}

var (
	codeRE = regexp.MustCompile(`Code: (\d+)\.`)
	nameRE = regexp.MustCompile(`\(([A-Z][A-Z0-9_]+)\)(?:\s*\(version [^)]*\))?\.?\s*$`)
)

// newError parses ClickHouse's "Code: N. DB::Exception: ... (NAME) (version ...)" text.
func newError(op, msg string) *Error {
	e := &Error{Op: op, Message: msg}
	if m := codeRE.FindStringSubmatch(msg); m != nil {
		e.Code, _ = strconv.Atoi(m[1])
	}
	if m := nameRE.FindStringSubmatch(msg); m != nil {
		e.Name = m[1]
	}
	return e
}

// Column is one column of a table or result: its name and ClickHouse type, as in the DDL
// (e.g. "LowCardinality(String)", "DateTime64(6, 'UTC')", "Map(String, String)").
//
// For Insert, the Go value of a row must match the type: string for String, FixedString and
// LowCardinality(String); bool for Bool; the sized integer and float types for numbers (int32
// for Int32, uint64 for UInt64, ...); time.Time for Date, DateTime and DateTime64; []string,
// []int32, ... for Array; map[string]string, map[string][]string, map[string]uint64 for Map.
type Column struct {
	Name string
	Type string
}

// Result is the whole output of a query.
type Result struct {
	Columns []Column
	// Rows hold each value in ClickHouse's text form, as TabSeparated prints it before
	// escaping: numbers as digits, DateTime64(6) as "2026-01-02 03:04:05.123456", arrays as
	// ['a','b'], maps as {'k':'v'}, NULL as Null.
	Rows [][]string
}

// Null is how a NULL value appears in Result.Rows.
const Null = `\N`

// Index returns the position of the column named name, or -1.
func (r *Result) Index(name string) int {
	for i, c := range r.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// Value returns the value of column name in row i ("" when there is no such column).
func (r *Result) Value(i int, name string) string {
	j := r.Index(name)
	if j < 0 || i >= len(r.Rows) {
		return ""
	}
	return r.Rows[i][j]
}
