package chdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// Session is a further connection to an open Engine, with settings of its own given at connect
// time, for statements that must not share the Engine's connection: untrusted reads above all.
//
// Why a connection of its own (measured with chDB 26.7.3):
//   - Settings given when a connection is opened hold for every statement on it, and with
//     readonly=1 no statement can change them: not a SETTINGS clause in a subquery (with the
//     old analyzer, enable_analyzer=0), not SET, not a statement hidden behind a `;` that a
//     text splitter missed. Settings in the query text do not have that force.
//   - Statements on different connections run at the same time, so a long read does not hold
//     up the store writer on the Engine's own connection.
//   - After a statement fails part-way, the output it had produced stays on its connection
//     and is put in front of the next statement's result. A Session therefore closes and
//     reopens its connection after every failed statement, before anyone else can use it.
//
// Concurrency: a Session runs one statement at a time (callers queue; waiting honours ctx);
// use several Sessions for parallel statements. Lifecycle: Engine.OpenSession, any number of
// statements, Close; a Session must be closed before its Engine. Ownership: results are Go
// copies that belong to the caller.
type Session struct {
	e      *Engine
	args   []string
	init   []string
	sem    chan struct{} // one token: held while a statement runs, or while closing
	thread *thread

	conn, handle unsafe.Pointer // nil once closed
}

// SessionOptions configure OpenSession.
type SessionOptions struct {
	// Settings are ClickHouse settings fixed for the connection's life, e.g.
	// {"readonly", "1"}, {"max_memory_usage", "1000000000"}. Order is kept.
	Settings [][2]string
	// Init are statements run after every connect, e.g. "USE db" (the engine ignores a
	// --database argument). A session reopened after a failure runs them again.
	Init []string
}

// ErrBusy is returned by Session.Exec when the statement was cancelled but the engine had
// not stopped it by the time Exec gave up waiting; the Session stays unusable until it has.
var ErrBusy = errors.New("chdb: the cancelled statement is still running in the engine")

// OpenSession opens a further connection to the engine's data directory with opts.Settings.
// The connection gets an OS thread of its own at the engine's nice value (exempt from the
// idler, as the engine's is).
func (e *Engine) OpenSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	if err := e.acquire(ctx); err != nil { // the Engine must stay open while a session connects
		return nil, err
	}
	defer e.release()
	args := []string{"clickhouse"}
	if e.dataDir != "" {
		args = append(args, "--path="+e.dataDir)
	}
	for _, kv := range opts.Settings {
		if !validSettingName(kv[0]) || strings.ContainsRune(kv[1], 0) {
			return nil, fmt.Errorf("chdb: bad session setting %q", kv[0])
		}
		args = append(args, "--"+kv[0]+"="+kv[1])
	}
	t, err := startThread(e.thread.nice, e.idle, e.confined)
	if err != nil {
		return nil, err
	}
	s := &Session{e: e, args: args, init: opts.Init, sem: make(chan struct{}, 1), thread: t}
	if err := s.connect(); err != nil {
		s.thread.stop()
		return nil, err
	}
	return s, nil
}

func validSettingName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return true
}

// connect opens the connection; the caller holds sem (or owns s alone).
func (s *Session) connect() error {
	var conn unsafe.Pointer
	s.thread.do(func() { conn = connect(s.e.api, s.args) })
	if conn == nil {
		return fmt.Errorf("chdb: chdb_connect for a session failed (args %v; the engine printed the reason on stderr)", s.args[1:])
	}
	handle := *(*unsafe.Pointer)(conn)
	if handle == nil {
		s.thread.do(func() { s.e.api.closeConn(conn) })
		return errors.New("chdb: chdb_connect returned an empty session connection")
	}
	s.conn, s.handle = conn, handle
	for _, stmt := range s.init {
		var err error
		s.thread.do(func() {
			_, err = collect(s.e.api, s.e.api.queryN(handle, strPtr(stmt), uintptr(len(stmt)), strPtr(DefaultFormat), uintptr(len(DefaultFormat))), "session init", stmt)
			runtime.KeepAlive(stmt)
		})
		if err != nil {
			s.thread.do(func() { s.e.api.closeConn(conn) })
			s.conn, s.handle = nil, nil
			return err
		}
	}
	return nil
}

// reset closes the connection and opens a fresh one, dropping whatever a failed statement left
// on it. On failure the Session is closed.
func (s *Session) reset() error {
	if s.conn != nil {
		s.thread.do(func() { s.e.api.closeConn(s.conn) })
		s.conn, s.handle = nil, nil
	}
	return s.connect()
}

func (s *Session) acquire(ctx context.Context) error {
	return take(ctx, s.sem, func() bool { return s.conn != nil })
}

// Exec runs one statement (Engine.Exec's meaning of sql, format and params). When ctx is done
// while the statement runs, onCancel is called once (it should stop the statement in the
// engine, e.g. with KILL QUERY from another connection) and Exec waits up to grace for the
// engine to return; then it returns ctx's error, or ErrBusy wrapped with it if the engine had
// not returned yet (the Session is released only when it has). A failed or cancelled statement
// resets the connection.
func (s *Session) Exec(ctx context.Context, sql, format string, params map[string]string, onCancel func(), grace time.Duration) (*Result, error) {
	if strings.IndexByte(sql, 0) >= 0 {
		return nil, ErrNULInQuery
	}
	if format == "" {
		format = DefaultFormat
	}
	return s.run(ctx, onCancel, grace, func(handle unsafe.Pointer) (*Result, error) {
		var res unsafe.Pointer
		if params == nil {
			res = s.e.api.queryN(handle, strPtr(sql), uintptr(len(sql)), strPtr(format), uintptr(len(format)))
		} else {
			res = queryWithParams(s.e.api.queryWithParamsN, handle, sql, format, params)
		}
		runtime.KeepAlive(sql)
		runtime.KeepAlive(format)
		return collect(s.e.api, res, "query", sql)
	})
}

// Stream is Exec for output of unknown size: it hands the output to each chunk by chunk (with
// the chunk's rows) as the engine formats it, so no more than a chunk is ever held here, and
// stops the statement as soon as each returns an error: io.EOF ends the statement early as a
// success, any other is returned. Each chunk is formatted on its own: a format with a header
// (the *WithNames formats) repeats it in every chunk, and a document format (JSON, XML) writes
// one document a chunk, so a caller that passes them on must join them. each is called on
// the engine's thread and must not keep the slice. The Result has no Data; its row and byte
// counts are the chunks' sums, and Elapsed is measured here.
func (s *Session) Stream(ctx context.Context, sql, format string, params map[string]string, each func(chunk []byte, rows uint64) error, onCancel func(), grace time.Duration) (*Result, error) {
	a := s.e.api
	if a.streamQueryN == nil {
		return nil, fmt.Errorf("%w: it does not export the streaming query functions", ErrIncompatibleLibrary)
	}
	if strings.IndexByte(sql, 0) >= 0 {
		return nil, ErrNULInQuery
	}
	if format == "" {
		format = DefaultFormat
	}
	return s.run(ctx, onCancel, grace, func(handle unsafe.Pointer) (*Result, error) {
		start := time.Now()
		var stream unsafe.Pointer
		if params == nil {
			stream = a.streamQueryN(handle, strPtr(sql), uintptr(len(sql)), strPtr(format), uintptr(len(format)))
		} else {
			stream = queryWithParams(a.streamQueryWithParamsN, handle, sql, format, params)
		}
		runtime.KeepAlive(sql)
		runtime.KeepAlive(format)
		if stream == nil {
			return nil, engineError("query", sql, errNilResult.Error())
		}
		defer a.destroyResult(stream)
		if msg := a.resultError(stream); msg != "" {
			return nil, engineError("query", sql, msg)
		}
		r := &Result{}
		for {
			chunk := a.streamFetchResult(handle, stream)
			if chunk == nil {
				return nil, engineError("query", sql, errNilResult.Error())
			}
			if msg := a.resultError(chunk); msg != "" {
				a.destroyResult(chunk)
				return nil, engineError("query", sql, msg)
			}
			n := a.resultLength(chunk)
			if n == 0 {
				a.destroyResult(chunk)
				break
			}
			rows := a.resultRowsRead(chunk)
			r.RowsRead += rows
			r.BytesRead += a.resultBytesRead(chunk)
			r.StorageRowsRead += a.resultStorageRows(chunk)
			r.StorageBytesRead += a.resultStorageBytes(chunk)
			var err error
			if buf := a.resultBuffer(chunk); buf != nil {
				err = each(unsafe.Slice(buf, n), rows)
			}
			a.destroyResult(chunk)
			if err != nil {
				a.streamCancelQuery(handle, stream)
				if err == io.EOF {
					break
				}
				return nil, err
			}
		}
		r.Elapsed = time.Since(start)
		return r, nil
	})
}

// run runs one statement's C calls (fn, given the connection handle) on the Session's thread,
// with Exec's cancellation and reset rules.
func (s *Session) run(ctx context.Context, onCancel func(), grace time.Duration, fn func(handle unsafe.Pointer) (*Result, error)) (*Result, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	type outcome struct {
		r   *Result
		err error
	}
	done := make(chan outcome, 1)
	handle := s.handle
	go s.thread.do(func() {
		r, err := fn(handle)
		done <- outcome{r, err}
	})
	finish := func(o outcome, cancelled bool) {
		if o.err != nil || cancelled {
			// A failed reset leaves the Session closed: later calls get ErrClosed.
			_ = s.reset()
		}
		<-s.sem
	}
	select {
	case o := <-done:
		finish(o, false)
		return o.r, o.err
	case <-ctx.Done():
	}
	if onCancel != nil {
		onCancel()
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case o := <-done:
		finish(o, true)
		return nil, ctx.Err()
	case <-t.C:
		go func() { finish(<-done, true) }()
		return nil, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
	}
}

// QueryClass is what a statement does, as the engine's own parser classifies it
// (chdb_classify_query_n). Values ascend by how much the statement may change.
type QueryClass uint32

// The classes of chdb_classify_query_n.
const (
	ClassReadOnly       QueryClass = 0 // SELECT, SHOW, DESCRIBE, EXPLAIN, EXISTS
	ClassMutating       QueryClass = 1 // INSERT, CREATE, ALTER, DROP, ...
	ClassMutatingGlobal QueryClass = 2 // functions, named collections, access entities, system
	ClassControl        QueryClass = 3 // USE, SET, SYSTEM, KILL, BACKUP, INTO OUTFILE, ...
	ClassUnknown        QueryClass = 4 // did not parse, or a statement the engine does not classify
)

func (c QueryClass) String() string {
	switch c {
	case ClassReadOnly:
		return "READ_ONLY"
	case ClassMutating:
		return "MUTATING"
	case ClassMutatingGlobal:
		return "MUTATING_GLOBAL"
	case ClassControl:
		return "CONTROL"
	case ClassUnknown:
		return "UNKNOWN"
	}
	return fmt.Sprintf("class %d", uint32(c))
}

// Analysis is the engine parser's account of a text: how many statements it holds and the
// most far-reaching class among them.
type Analysis struct {
	Statements uint32
	Class      QueryClass
}

// queryAnalysisV1 is chdb_query_analysis_v1; its layout is the C ABI.
type queryAnalysisV1 struct {
	structSize     uint32
	statementCount uint32
	_              uint32 // flags: secrets, writes-only-target, database lifecycle (unused here)
	queryClass     uint32
}

// Classify asks the engine's parser what sql would do, without running it. Text that does not
// parse is ClassUnknown with no statements, not an error.
func (s *Session) Classify(ctx context.Context, sql string) (Analysis, error) {
	if s.e.api.classifyQueryN == nil {
		return Analysis{}, fmt.Errorf("%w: it does not export chdb_classify_query_n", ErrIncompatibleLibrary)
	}
	if err := s.acquire(ctx); err != nil {
		return Analysis{}, err
	}
	defer func() { <-s.sem }()
	out := queryAnalysisV1{structSize: uint32(unsafe.Sizeof(queryAnalysisV1{}))}
	var state int32
	s.thread.do(func() {
		state = s.e.api.classifyQueryN(s.handle, strPtr(sql), uintptr(len(sql)), nil, 0, &out)
		runtime.KeepAlive(sql)
	})
	if state != 0 {
		return Analysis{}, errors.New("chdb: chdb_classify_query_n could not analyse the text")
	}
	return Analysis{Statements: out.statementCount, Class: QueryClass(out.queryClass)}, nil
}

// Close closes the connection after a running statement. Closing twice returns nil.
func (s *Session) Close() error {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.thread == nil {
		return nil
	}
	if s.conn != nil {
		s.thread.do(func() { s.e.api.closeConn(s.conn) })
	}
	s.thread.stop()
	s.thread, s.conn, s.handle = nil, nil, nil
	return nil
}
