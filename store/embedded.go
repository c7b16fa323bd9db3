package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/peertrail/peertrail/store/chdb"
)

// EmbeddedOptions configure OpenEmbedded.
type EmbeddedOptions struct {
	// DataDir holds the engine's databases (peertrail uses <data-dir>/clickhouse). Empty
	// means in memory, lost on Close (tests).
	DataDir string
	// LibPath is the libchdb.so to load; empty: $CHDB_LIB_PATH, then the cache that
	// scripts/fetch-chdb.sh fills (see chdb.Options).
	LibPath string
	// MaxMemory caps the whole engine, the writer's inserts and merges and every read
	// together (max_server_memory_usage); 0: DefaultMaxMemory().
	MaxMemory int64
	// DirtyPageDecay is how soon the engine's allocator returns freed pages to the system
	// (chdb.Options.DirtyPageDecay); 0 keeps the library's own.
	DirtyPageDecay time.Duration
	// Confine confines the engine's threads to DataDir and the system files they read, where
	// the kernel has Landlock (chdb.Options.Confine; Confined says whether it did).
	Confine bool
}

// Embedded is the Store backed by the ClickHouse engine inside this process (chDB). A process
// holds at most one: OpenEmbedded fails with an error wrapping chdb.ErrAlreadyOpen otherwise.
type Embedded struct {
	engine *chdb.Engine

	mu       sync.Mutex
	encoders map[string]*rowEncoder // by table and column list; compiled once
	closers  []io.Closer            // closed before the engine (the SQL front's read connections)
}

// OpenEmbedded starts the embedded engine on opts.DataDir. A missing library is an error
// wrapping chdb.ErrLibraryNotFound whose text says how to get it.
func OpenEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.MaxMemory <= 0 {
		opts.MaxMemory = DefaultMaxMemory()
	}
	e, err := chdb.Open(ctx, chdb.Options{DataDir: opts.DataDir, LibPath: opts.LibPath,
		MaxServerMemory: opts.MaxMemory, DirtyPageDecay: opts.DirtyPageDecay, Confine: opts.Confine})
	if err != nil {
		return nil, fmt.Errorf("store: open the embedded ClickHouse engine: %w", err)
	}
	return &Embedded{engine: e, encoders: map[string]*rowEncoder{}}, nil
}

// Confined reports whether the kernel confines the engine's threads (EmbeddedOptions.Confine).
func (s *Embedded) Confined() bool { return s.engine.Confined() }

// Engine is the underlying engine, for the HTTP interface and benchmarks.
func (s *Embedded) Engine() *chdb.Engine { return s.engine }

// Exec implements Store.
func (s *Embedded) Exec(ctx context.Context, stmt string) error {
	_, err := s.engine.Exec(ctx, stmt, "", nil)
	return embeddedError("exec", err)
}

// Query implements Store.
func (s *Embedded) Query(ctx context.Context, query string, params map[string]string) (*Result, error) {
	// nil params would select the engine's plain query call, which does not bind {x:T}.
	if params == nil {
		params = map[string]string{}
	}
	out, err := s.engine.QueryWithParams(ctx, query, "TabSeparatedWithNamesAndTypes", params)
	if err != nil {
		return nil, embeddedError("query", err)
	}
	r, err := parseTSV(out)
	if err != nil {
		return nil, fmt.Errorf("store: query %q: %w", shorten(query), err)
	}
	return r, nil
}

// Insert implements Store: the rows are encoded as RowBinary and streamed into the engine in
// one INSERT, so they form one insert block for the materialized views.
func (s *Embedded) Insert(ctx context.Context, table string, columns []Column, rows [][]any) error {
	enc, err := s.encoder(table, columns)
	if err != nil {
		return err
	}
	// Encoded as the engine reads: a batch of rows is ~100 MB of RowBinary, and building it
	// whole cost more (fresh memory, page faults, copies as it grew) than the insert itself.
	r := &rowReader{enc: enc, rows: rows}
	_, err = s.engine.Insert(ctx, insertStatement(table, columns), "RowBinary", r)
	if r.err != nil {
		return fmt.Errorf("store: insert into %s: %w", table, r.err)
	}
	return embeddedError("insert", err)
}

// rowReader encodes rows into RowBinary as it is read, a few hundred KiB at a time.
type rowReader struct {
	enc  *rowEncoder
	rows [][]any
	next int
	buf  []byte
	off  int
	err  error
}

const rowReaderChunk = 256 << 10

func (r *rowReader) Read(p []byte) (int, error) {
	if r.off == len(r.buf) {
		if r.err != nil {
			return 0, r.err
		}
		if r.next == len(r.rows) {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for r.next < len(r.rows) && len(r.buf) < rowReaderChunk {
			var err error
			if r.buf, err = r.enc.appendRow(r.buf, r.rows[r.next]); err != nil {
				r.err = fmt.Errorf("row %d: %w", r.next, err)
				return 0, r.err
			}
			r.next++
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// InsertRowBinary streams data, already in RowBinary for columns, into table. Benchmarks use
// it to measure the engine's own bulk insert against the writer's.
func (s *Embedded) InsertRowBinary(ctx context.Context, table string, columns []Column, data []byte) error {
	_, err := s.engine.Insert(ctx, insertStatement(table, columns), "RowBinary", bytes.NewReader(data))
	return embeddedError("insert", err)
}

// EncodeRowBinary encodes rows for columns as RowBinary.
func EncodeRowBinary(columns []Column, rows [][]any) ([]byte, error) {
	enc, err := newRowEncoder(columns)
	if err != nil {
		return nil, err
	}
	var buf []byte
	for i, row := range rows {
		if buf, err = enc.appendRow(buf, row); err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
	}
	return buf, nil
}

func (s *Embedded) encoder(table string, columns []Column) (*rowEncoder, error) {
	var key strings.Builder
	key.WriteString(table)
	for _, c := range columns {
		key.WriteString("\x00" + c.Name + "\x00" + c.Type)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if enc, ok := s.encoders[key.String()]; ok {
		return enc, nil
	}
	enc, err := newRowEncoder(columns)
	if err != nil {
		return nil, fmt.Errorf("store: insert into %s: %w", table, err)
	}
	s.encoders[key.String()] = enc
	return enc, nil
}

// Close implements Store. It first closes what CloseFirst registered.
func (s *Embedded) Close() error {
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	for _, c := range closers {
		c.Close()
	}
	return s.engine.Close()
}

// CloseFirst registers c to be closed when s closes, before the engine: connections of the
// engine opened beside the store (package sqlhttp's read pool).
func (s *Embedded) CloseFirst(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closers = append(s.closers, c)
}

func insertStatement(table string, columns []Column) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(table)
	b.WriteString(" (")
	for i, c := range columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c.Name))
	}
	b.WriteString(")")
	if set := insertSettings(table); set != "" {
		b.WriteString(" SETTINGS ")
		b.WriteString(set)
	}
	return b.String()
}

// insertSettings are the query settings of an insert into table. The engine's merge of each
// inserted block by the table's sorting key (optimize_on_insert: a ReplacingMergeTree folding
// the rows of one key within the block) copies every column of the block, and for these two
// tables it buys nothing, at a cost in every insert (BENCHMARKS.md, "A sixth session" and "A
// thirteenth session"). The events writer stores each event once (before a redelivery it looks
// up what may already be stored). An insert of chains may hold two rows of one chain (a
// retraction and its new revision, or two revisions), but every reader of the chains table
// already takes the highest version (FINAL, or LIMIT 1 BY id), as it must across inserts, and
// the rollups count every row inserted either way (views see the block as inserted). Rows of
// one key are still folded by the tables' merges, as they are across inserts. Both stores take the clause (clickhouse-go
// keeps a batch's SETTINGS; TestServerStoreAgainstEngine writes events through it).
func insertSettings(table string) string {
	if table == EventsTable || table == ChainsTable {
		return "optimize_on_insert = 0"
	}
	return ""
}

// QuoteIdent quotes a ClickHouse identifier with backquotes.
func QuoteIdent(s string) string { return quoteIdent(s) }

// EngineError turns an error of the embedded engine (package chdb) into this package's: one
// wrapping ErrClosed, or an *Error with ClickHouse's code. op says what was being done.
func EngineError(op string, err error) error { return embeddedError(op, err) }

// NewError is the *Error of ClickHouse's error text ("Code: N. DB::Exception: ... (NAME)").
func NewError(op, msg string) *Error { return newError(op, msg) }

// quoteIdent quotes a ClickHouse identifier with backquotes.
func quoteIdent(s string) string {
	return "`" + identEscaper.Replace(s) + "`"
}

// identEscaper is built once, not per identifier (every insert statement quotes each of its
// columns). It is never changed after.
var identEscaper = strings.NewReplacer("\\", "\\\\", "`", "\\`")

// embeddedError turns the engine's errors into this package's.
func embeddedError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, chdb.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	var ee *chdb.EngineError
	if errors.As(err, &ee) {
		return newError(op, ee.Message)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
