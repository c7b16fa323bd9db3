// Package chdb runs the embedded ClickHouse engine (chDB, libchdb.so) inside
// the process, through its C API, loaded at run time with purego: no cgo, and
// no hard dependency — a binary built with this package runs without the
// library and gets ErrLibraryNotFound from Open only when it asks for the
// engine.
//
// Getting the library: scripts/fetch-chdb.sh downloads the pinned chDB
// (Version) into ~/.cache/peertrail and prints the path; Open finds it there.
//
//	e, err := chdb.Open(ctx, chdb.Options{DataDir: "/var/lib/peertrail/ch"})
//	defer e.Close()
//	_, err = e.Query(ctx, "CREATE TABLE t (a UInt64) ENGINE = MergeTree ORDER BY a", "")
//	_, err = e.Insert(ctx, "INSERT INTO t (a)", "JSONEachRow", rows)     // bulk data
//	out, err := e.Query(ctx, "SELECT count() FROM t", "JSONEachRow")
//	out, err = e.QueryWithParams(ctx, "SELECT {n:UInt64} + 1", "CSV", map[string]string{"n": "41"})
//
// What the library imposes (measured with chDB 26.7.3-stable.1):
//
//   - One engine per process. libchdb boots one ClickHouse server per
//     process; Open refuses a second concurrent Engine (ErrAlreadyOpen). After
//     Close, Open may be called again, also with another DataDir (it boots the
//     engine again, ~0.2 s). A data directory is locked by one process at a
//     time (ErrDataDirLocked).
//   - Signal handlers. By default the engine installs process-wide signal
//     handlers; a Go nil dereference that recover() should catch then hangs
//     the process. Open calls chdb_set_signal_handlers_enabled(0) before
//     chdb_connect, which keeps Go's panics working.
//   - Bulk data goes through Insert (libchdb's streaming insert): 1M rows/s
//     and more (see BenchmarkInsert), any input format including binary
//     ones. Binary data inline in the query text is silently truncated past
//     ~64 KiB, so Query refuses text with a NUL byte (ErrNULInQuery).
//   - A statement running inside the engine cannot be interrupted; ctx is
//     honoured before it starts, and between chunks of an Insert.
//   - The engine's own log. Left to itself, libchdb logs to stderr when stderr
//     is a terminal, in colour, into the program's output. Open sends it to a
//     file instead (Options.LogFile, default <DataDir>/engine.log, at
//     Options.LogLevel, default warning) and never to the console; the
//     engine's "Logging warning to <file>" notice on stderr is dropped.
//   - Each streaming insert (Insert) makes the engine log one
//     "<Fatal> ThreadStatus: current_thread contains invalid address", from
//     the global pool thread that ran the insert's pipeline, whatever the
//     settings (max_threads, max_insert_threads, concurrency control, parallel
//     parsing: measured), the calling thread or the table: a ThreadStatus of
//     libchdb's streaming insert is destroyed on a thread whose current
//     ThreadStatus is another one. It is not a crash (the rows arrive, the
//     engine goes on; Query's inline INSERTs do not log it) and it cannot be
//     fixed from outside the library, so it stays in the engine's log file.
//
// See Engine for the concurrency and ownership contract.
package chdb
