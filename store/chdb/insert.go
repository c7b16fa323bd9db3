package chdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"
	"unsafe"
)

// insertChunk is how much Insert reads from its io.Reader per
// chdb_stream_append call. The engine copies each chunk, so one buffer is
// reused; chunks need not end on a row boundary.
const insertChunk = 1 << 20

// Insert streams data into the engine with libchdb's streaming INSERT
// (chdb_stream_insert_n, chdb_stream_append, chdb_stream_done), the way to
// load large batches: the data never becomes part of the SQL text, so there is
// no size limit beyond the engine's own, and any ClickHouse input format works,
// binary ones included ("JSONEachRow", "TabSeparated", "CSV", "RowBinary",
// "Native", "Parquet", ...).
//
// stmt is the INSERT without FORMAT clause or data, e.g.
// "INSERT INTO db.t (a, b)". format names the format of data, which is read to
// EOF in chunks of 1 MiB (they need not end on row boundaries). The Result
// carries RowsWritten and BytesWritten (RowsWritten includes rows that
// materialized views wrote) and Elapsed, the wall time of the whole insert.
//
// The engine's lock is held for the whole insert: no other statement runs
// until it is done. ctx is checked between chunks; when it is done, or data
// returns an error, the stream is cancelled. Cancelling does not roll back:
// blocks the engine already committed to the table stay there (ClickHouse's
// usual semantics for an aborted INSERT).
func (e *Engine) Insert(ctx context.Context, stmt, format string, data io.Reader) (*Result, error) {
	if err := e.acquire(ctx); err != nil {
		return nil, err
	}
	defer e.release()

	start := time.Now()
	a, t := e.api, e.thread
	var stream unsafe.Pointer
	var msg string
	t.do(func() {
		stream = a.streamInsertN(e.handle, strPtr(stmt), uintptr(len(stmt)), strPtr(format), uintptr(len(format)))
		runtime.KeepAlive(stmt)
		runtime.KeepAlive(format)
		if stream != nil {
			msg = a.streamInsertError(stream)
		}
	})
	if stream == nil {
		return nil, engineError("insert", stmt, "chdb_stream_insert_n returned no stream")
	}
	// Required for every handle, on every path; it cancels an unfinished stream.
	defer t.do(func() { a.destroyInsertStream(stream) })
	if msg != "" {
		return nil, engineError("insert", stmt, msg)
	}
	cancel := func() { t.do(func() { a.streamCancelInsert(stream) }) }

	// The data is read (often encoded as it is read) here, at the caller's priority; only the
	// engine's calls go to its thread.
	if e.chunk == nil {
		e.chunk = make([]byte, insertChunk)
	}
	buf := e.chunk
	for {
		if err := ctx.Err(); err != nil {
			cancel()
			return nil, fmt.Errorf("chdb: insert %q cancelled: %w", shorten(stmt, 200), err)
		}
		n, rerr := io.ReadFull(data, buf)
		if n > 0 {
			t.do(func() {
				if a.streamAppend(stream, &buf[0], uintptr(n)) != 0 {
					msg = a.streamInsertError(stream)
					if msg == "" {
						msg = "chdb_stream_append failed"
					}
					a.streamCancelInsert(stream)
				}
			})
			if msg != "" {
				return nil, engineError("insert", stmt, msg)
			}
		}
		if rerr == io.EOF || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			cancel()
			return nil, fmt.Errorf("chdb: insert %q: reading data: %w", shorten(stmt, 200), rerr)
		}
	}
	runtime.KeepAlive(buf)

	var (
		r   *Result
		err error
	)
	t.do(func() {
		res := a.streamDone(stream)
		if res == nil {
			if msg := a.streamInsertError(stream); msg != "" {
				err = engineError("insert", stmt, msg)
				return
			}
		}
		r, err = collect(a, res, "insert", stmt)
	})
	if err != nil {
		return nil, err
	}
	// chdb_result_elapsed of a stream insert is not restarted per statement
	// (measured: it includes the idle time since the previous statement), so
	// report the wall time of the insert instead.
	r.Elapsed = time.Since(start)
	return r, nil
}
