package chdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/peertrail/peertrail/internal/pageout"
)

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrLibraryNotFound: no libchdb.so at any of the places Open looks.
	// Its text is for the people who run peertrail: the serve flag --chdb-lib (store.libPath in
	// the config file) and $CHDB_LIB_PATH, not the Go field they end up in.
	ErrLibraryNotFound = errors.New("chdb: libchdb.so not found: run scripts/fetch-chdb.sh (from the peertrail " +
		"repository) to download chDB " + Version + " into the cache, or point `peertrail serve --chdb-lib` " +
		"(store.libPath in the config file) or $CHDB_LIB_PATH at a libchdb.so")
	// ErrIncompatibleLibrary: the library loaded but lacks a C entry point this package needs.
	ErrIncompatibleLibrary = errors.New("chdb: incompatible libchdb.so")
	// ErrAlreadyOpen: Open was called while another Engine of this process is still open.
	ErrAlreadyOpen = errors.New("chdb: an engine is already open in this process " +
		"(libchdb runs one session per process: share the open *Engine, or Close it first)")
	// ErrDataDirLocked: another process has the data directory open.
	ErrDataDirLocked = errors.New("chdb: data directory is in use by another process " +
		"(the engine locks <DataDir>/status; one process at a time)")
	// ErrClosed: the Engine was closed.
	ErrClosed = errors.New("chdb: engine is closed")
	// ErrNULInQuery: the statement text contains a NUL byte, i.e. binary data
	// inline after FORMAT. libchdb silently drops such data past about 64 KiB
	// (measured: 2,570 of 1,000,000 RowBinary rows arrived, without an error),
	// so it is refused; stream binary data with Insert instead.
	ErrNULInQuery = errors.New("chdb: query text contains a NUL byte: libchdb silently truncates " +
		"inline binary data past ~64 KiB; pass binary data with (*Engine).Insert")
)

// EngineError is a failure reported by the ClickHouse engine itself: Message is
// the engine's text (e.g. "Code: 60. DB::Exception: Unknown table ..."), Op is
// what this package was doing ("query", "insert", ...) and Query is the
// statement, shortened for display.
type EngineError struct {
	Op      string
	Query   string
	Message string
}

func (e *EngineError) Error() string {
	return fmt.Sprintf("chdb: %s %q: %s", e.Op, e.Query, e.Message)
}

func engineError(op, sql, msg string) error {
	return &EngineError{Op: op, Query: shorten(sql, 200), Message: msg}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// process is the one piece of package-level state: a guard that enforces one
// open Engine per process.
//
// libchdb boots a single ClickHouse server (one storage path, one global
// context, one set of background threads) per process; a second chdb_connect
// with another path while a connection is open is not a second engine, and
// using the library from two places without coordination is undefined
// behaviour. The guard lives at package level because the constraint is
// process-wide and no value owned by a caller could see the other callers.
//
// It also remembers which file was dlopened: loading a second, different
// libchdb.so into the same process would put two copies of ClickHouse's global
// state side by side, so a later Open must use the same library.
var process struct {
	mu      sync.Mutex
	open    bool   // an Engine is open
	libPath string // the library loaded into this process, "" before the first Open
	// rules confine the engine's threads once an Open asked for it, and confinedTo are the
	// directories they may write: the engine's threads outlive an Engine and Landlock cannot
	// be lifted, so every later Open of the process is confined the same way, to them.
	rules      *ruleset
	confinedTo []string
}

// Options configure Open.
type Options struct {
	// LibPath is the libchdb.so to load. When empty Open tries, in order,
	// $CHDB_LIB_PATH, DefaultLibPath() (where scripts/fetch-chdb.sh puts it)
	// and /usr/local/lib/libchdb.so.
	LibPath string
	// DataDir is the directory that holds the databases. It is created if
	// missing, and locked by the engine against other processes while open.
	// Empty means an in-memory engine whose data is lost on Close.
	DataDir string
	// Nice is the nice value (1-19) the engine's threads run at, below the rest of the
	// process (see thread). 0 means DefaultNice; a negative value leaves them at the
	// process's own.
	Nice int
	// MaxServerMemory caps the memory of the whole engine, every connection together
	// (max_server_memory_usage), in bytes. 0 leaves the engine's default: 0.9 of the host's
	// RAM, blind to a container's limit.
	MaxServerMemory int64
	// LogFile is where the engine writes its own log (ClickHouse's logger, which rotates it at
	// 100 MB and keeps one old file). Empty means DefaultLogFile under DataDir, or no log at
	// all for an in-memory engine. The engine never logs to the terminal: left to itself it
	// writes to a terminal on stderr, in colour, into the program's own output.
	LogFile string
	// LogLevel is the engine log's level: fatal, critical, error, warning, notice, information,
	// debug or trace. Empty means DefaultLogLevel.
	LogLevel string
	// Confine confines the engine's threads with Landlock, where the kernel has it (see
	// Engine.Confined): they may read the library and the system files the engine needs, read
	// and write DataDir and the log file's directory, and nothing else of the file system,
	// and make no TCP connection. The rest of the process is not confined. It needs DataDir.
	Confine bool
	// DirtyPageDecay is how long the engine's allocator keeps the pages the engine freed
	// before it returns them to the OS (jemalloc's dirty_decay_ms; see allocatorConf). 0
	// keeps the library's own, 5 s. It takes effect when the library is loaded, at the first
	// Open of the process, unless JE_MALLOC_CONF is set.
	DirtyPageDecay time.Duration
}

// DefaultLogFile is the engine's log file, relative to Options.DataDir, when Options.LogFile
// is empty.
const DefaultLogFile = "engine.log"

// DefaultLogLevel is the engine log's level when Options.LogLevel is empty.
const DefaultLogLevel = "warning"

// allocatorConfEnv is the environment variable the library's allocator (a jemalloc linked
// into it) reads its options from when the library is loaded; its mallctl is not exported,
// so this is the only way in. Measured with chDB 26.7.3: MALLOC_CONF is ignored.
const allocatorConfEnv = "JE_MALLOC_CONF"

// allocatorConf sets the allocator's options for the library about to be loaded, unless the
// operator set allocatorConfEnv: theirs wins, whole.
//
// Why: every insert and merge frees what it used, and jemalloc keeps freed pages resident for
// 5 s (its dirty pages); a shorter decay holds less for more CPU, the page faults that take
// the pages again, a longer one the reverse (BENCHMARKS.md, "A fourth session", "A
// twenty-third session"): the caller chooses (serve: server.Budget).
func allocatorConf(decay time.Duration) {
	if decay <= 0 || os.Getenv(allocatorConfEnv) != "" {
		return
	}
	// Setenv also sets the C environment the library reads.
	_ = os.Setenv(allocatorConfEnv, fmt.Sprintf("dirty_decay_ms:%d", decay.Milliseconds()))
}

// logArgs are the clickhouse-local arguments that send the engine's log to file at level, and
// never to the console (measured with chDB 26.7.3: --logger.log, --log-level and
// --logger.console are honoured, --logger.level is not). The engine's logger is set up by the
// first connection; later ones (sessions) leave it as it is.
func logArgs(file, level string) []string {
	args := []string{"--logger.console=0"}
	if file == "" {
		return args
	}
	if level == "" {
		level = DefaultLogLevel
	}
	return append(args, "--logger.log="+file, "--log-level="+level)
}

// Engine is an open chDB (embedded ClickHouse) session.
//
// Concurrency: an Engine may be shared by goroutines, but it runs one
// statement at a time. libchdb's connection executes a single statement at a
// time (and a streaming insert holds it until done), so every method takes the
// engine's lock for the whole call; callers queue, waiting for the lock
// honours their ctx. Queries do not run in parallel with each other; the
// engine parallelises each query internally.
//
// Cancellation: ctx is checked before a statement starts (also while waiting
// for the lock). A statement already running inside libchdb cannot be
// interrupted: the C query call has no cancel hook, so Query returns when the
// engine is done even if ctx expires meanwhile. Insert checks ctx between the
// chunks it streams and cancels the insert stream when ctx is done.
//
// Priority: every libchdb call runs on one OS thread of the engine's own, whose nice value
// (Options.Nice) every thread the engine starts inherits; see thread. Those threads are then
// moved to SCHED_IDLE within a second of their start; see idler.
//
// Ownership: every []byte returned is a Go copy that belongs to the caller;
// the engine's own result buffer is freed before the method returns.
//
// Lifecycle: Open, any number of statements, Close. Close waits for a running
// statement, closes the connection (flushing the engine's state to DataDir)
// and releases the process-wide slot, after which Open may be called again —
// with the same library file. Methods on a closed Engine return ErrClosed.
type Engine struct {
	sem      chan struct{} // one token: held while a statement runs or while closing
	thread   *thread       // runs every C call
	idle     *idler        // moves the engine's own threads to SCHED_IDLE; nil when not at nice
	confined *ruleset      // every call thread's Landlock ruleset (the process's); nil when not confined
	api      *api
	conn     unsafe.Pointer // chdb_connection * returned by chdb_connect; nil once closed
	handle   unsafe.Pointer // *conn, the chdb_connection the query calls take
	libPath  string
	dataDir  string
	logFile  string // "" when the engine keeps no log
	version  string
	// chunk is Insert's read buffer, kept between inserts (under sem): a fresh megabyte per
	// insert was most of what the store's writers allocated.
	chunk []byte
}

// Open loads libchdb (see Options.LibPath for where it looks) and connects to
// the data directory. A missing library returns an error wrapping
// ErrLibraryNotFound; a second Open while an Engine is open returns
// ErrAlreadyOpen.
func Open(ctx context.Context, opts Options) (*Engine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	libPath, err := resolveLibPath(opts.LibPath)
	if err != nil {
		return nil, err
	}

	process.mu.Lock()
	defer process.mu.Unlock()
	if process.open {
		return nil, ErrAlreadyOpen
	}
	if process.libPath != "" && process.libPath != libPath {
		return nil, fmt.Errorf("chdb: this process already loaded %s; it cannot load a second library %s", process.libPath, libPath)
	}

	nice := opts.Nice
	if nice == 0 {
		nice = DefaultNice
	}
	if err := keepsConfinement(opts); err != nil {
		return nil, err
	}
	if opts.Confine && process.rules == nil {
		rs, err := confine(libPath, &opts)
		if err != nil {
			return nil, err
		}
		if rs.enforced() {
			process.rules, process.confinedTo = rs, []string{opts.DataDir, filepath.Dir(opts.LogFile)}
		}
	}
	rs := process.rules
	// The engine starts its threads while it loads and connects, so both happen on its thread.
	idle := newIdler(nice)
	t, err := startThread(nice, idle, rs)
	if err != nil {
		return nil, err
	}
	e, err := open(ctx, t, libPath, opts)
	if err != nil {
		t.stop()
		return nil, err
	}
	e.confined = rs
	if t.nice > 0 {
		// Without a nice value of their own, the engine's threads cannot be told from the
		// runtime's.
		e.idle = idle
		idle.start()
	}
	process.open = true
	return e, nil
}

// confine builds the engine's ruleset for opts (made absolute, its directories created, as
// the ruleset names them).
func confine(libPath string, opts *Options) (*ruleset, error) {
	if opts.DataDir == "" {
		return nil, errors.New("chdb: Confine needs a DataDir")
	}
	var err error
	if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
		return nil, fmt.Errorf("chdb: data directory %q: %w", opts.DataDir, err)
	}
	if opts.LogFile == "" {
		opts.LogFile = filepath.Join(opts.DataDir, DefaultLogFile)
	}
	if opts.LogFile, err = filepath.Abs(opts.LogFile); err != nil {
		return nil, fmt.Errorf("chdb: log file %q: %w", opts.LogFile, err)
	}
	for _, d := range []string{opts.DataDir, filepath.Dir(opts.LogFile)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("chdb: %w", err)
		}
	}
	return confinement(libPath, opts.DataDir, filepath.Dir(opts.LogFile))
}

// keepsConfinement refuses an Open outside the directories an earlier Open of the process
// confined the engine's threads to.
func keepsConfinement(opts Options) error {
	if process.confinedTo == nil {
		return nil
	}
	dir, err := filepath.Abs(opts.DataDir)
	if opts.DataDir != "" && err == nil {
		for _, d := range process.confinedTo {
			if rel, err := filepath.Rel(d, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return nil
			}
		}
	}
	return fmt.Errorf("chdb: this process's engine threads are confined to %v since its first Open (Landlock cannot be lifted, and the engine's threads outlive an Engine): open the engine there, or leave the process's first Open unconfined", process.confinedTo)
}

// Confined reports whether the kernel confines the engine's threads (Options.Confine on a
// kernel with Landlock).
func (e *Engine) Confined() bool { return e.confined.enforced() }

// open is the part of Open that runs with process.mu held and the engine's thread started.
func open(ctx context.Context, t *thread, libPath string, opts Options) (*Engine, error) {
	var (
		h   uintptr
		err error
	)
	if process.libPath == "" {
		allocatorConf(opts.DirtyPageDecay)
	}
	t.do(func() { h, err = dlopen(libPath) })
	if err != nil {
		return nil, err
	}
	process.libPath = libPath // loaded now, whatever happens next
	a, err := bindAPI(h, libPath)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Must precede chdb_connect: with its default handlers installed, the
	// engine swallows the SIGSEGV of a Go nil dereference and the process
	// hangs instead of panicking (measured; see TestRecoverAfterLoad).
	t.do(func() { a.setSignalHandlersEnabled(0) })

	args := []string{"clickhouse"}
	dataDir := opts.DataDir
	if dataDir != "" {
		if dataDir, err = filepath.Abs(dataDir); err != nil {
			return nil, fmt.Errorf("chdb: data directory %q: %w", opts.DataDir, err)
		}
		if err := os.MkdirAll(dataDir, 0o750); err != nil {
			return nil, fmt.Errorf("chdb: data directory: %w", err)
		}
		if err := checkDataDirLock(dataDir); err != nil {
			return nil, fmt.Errorf("%w: %s", err, dataDir)
		}
		args = append(args, "--path="+dataDir)
	}
	if opts.MaxServerMemory > 0 {
		args = append(args, fmt.Sprintf("--max_server_memory_usage=%d", opts.MaxServerMemory))
	}
	logFile := opts.LogFile
	if logFile == "" && dataDir != "" {
		logFile = filepath.Join(dataDir, DefaultLogFile)
	}
	if logFile != "" {
		if logFile, err = filepath.Abs(logFile); err != nil {
			return nil, fmt.Errorf("chdb: log file %q: %w", opts.LogFile, err)
		}
		if err := os.MkdirAll(filepath.Dir(logFile), 0o750); err != nil {
			return nil, fmt.Errorf("chdb: log file: %w", err)
		}
	}
	args = append(args, logArgs(logFile, opts.LogLevel)...)
	var conn unsafe.Pointer
	// The engine announces "Logging <level> to <file>" on stderr as it sets up its logger.
	t.do(func() { withoutLoggingNotice(func() { conn = connect(a, args) }) })
	if conn == nil {
		where := "in memory"
		if dataDir != "" {
			where = "at " + dataDir
		}
		reason := "the engine printed the reason on stderr"
		if logFile != "" {
			reason = "the engine's log " + logFile + " may say why"
		}
		return nil, fmt.Errorf("chdb: chdb_connect failed to start the engine %s "+
			"(%s; is the directory writable and not in use by another process?)", where, reason)
	}
	handle := *(*unsafe.Pointer)(conn)
	if handle == nil {
		t.do(func() { a.closeConn(conn) })
		return nil, errors.New("chdb: chdb_connect returned an empty connection")
	}
	e := &Engine{
		sem:     make(chan struct{}, 1),
		thread:  t,
		api:     a,
		conn:    conn,
		handle:  handle,
		libPath: libPath,
		dataDir: dataDir,
		logFile: logFile,
	}
	t.do(func() { e.version = a.version() })
	return e, nil
}

// connect calls chdb_connect with a NUL-terminated argv built in Go memory,
// kept alive for the duration of the call (the engine copies its arguments).
func connect(a *api, args []string) unsafe.Pointer {
	bufs := make([][]byte, len(args))
	argv := make([]*byte, len(args)+1) // NULL-terminated like a C argv
	for i, s := range args {
		bufs[i] = append([]byte(s), 0)
		argv[i] = &bufs[i][0]
	}
	conn := a.connect(int32(len(args)), &argv[0])
	runtime.KeepAlive(bufs)
	runtime.KeepAlive(argv)
	return conn
}

// LibPath is the libchdb.so file the engine was loaded from.
func (e *Engine) LibPath() string { return e.libPath }

// DataDir is the absolute data directory, "" for an in-memory engine.
func (e *Engine) DataDir() string { return e.dataDir }

// LogFile is the engine's own log file, "" when it keeps none.
func (e *Engine) LogFile() string { return e.logFile }

// Version is the library's chdb_version(), e.g. "26.7.3".
func (e *Engine) Version() string { return e.version }

// Nice is the nice value the engine's threads run at: Options.Nice, or 0 when it could not be
// set (they then run at the process's priority).
func (e *Engine) Nice() int { return e.thread.nice }

// ReleaseLibraryPages pages out the library's code and constants that are resident in this
// process, for a long-running program to call once its one-time work with the engine is done
// (loading, connecting, its schema): that work touches far more of the library than the
// engine runs afterwards, and the kernel would otherwise keep those pages until it ran short of
// memory. The engine faults back what it runs, a page at a time (see pageout.Release). Pages
// that another process also maps stay. It does nothing but on Linux; an error (before Linux
// 5.4) changes nothing.
func (e *Engine) ReleaseLibraryPages() error {
	if err := pageout.Release(e.libPath); err != nil {
		return fmt.Errorf("chdb: page out the library: %w", err)
	}
	return nil
}

// acquire takes the engine's lock, giving up when ctx is done first.
func (e *Engine) acquire(ctx context.Context) error {
	return take(ctx, e.sem, func() bool { return e.conn != nil })
}

// take takes the one-token lock sem, giving up when ctx is done first. When open says the
// connection is gone once it holds the lock, it lets go and returns ErrClosed.
func take(ctx context.Context, sem chan struct{}, open func() bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !open() {
		<-sem
		return ErrClosed
	}
	// Both may be ready at once and select picks at random: check ctx again.
	if err := ctx.Err(); err != nil {
		<-sem
		return err
	}
	return nil
}

func (e *Engine) release() { <-e.sem }

// Close closes the connection, after waiting for a running statement. Closing
// an already closed Engine returns nil.
func (e *Engine) Close() error {
	e.sem <- struct{}{}
	defer e.release()
	if e.conn == nil {
		return nil
	}
	e.thread.do(func() { e.api.closeConn(e.conn) })
	e.thread.stop()
	e.conn, e.handle = nil, nil
	if e.idle != nil {
		e.idle.stop()
	}

	process.mu.Lock()
	process.open = false
	process.mu.Unlock()
	return nil
}

// Result is a statement's output and the engine's statistics about it.
type Result struct {
	// Data is the output in the requested format; owned by the caller.
	Data []byte
	// Elapsed is the engine's own measure of the execution time.
	Elapsed time.Duration
	// RowsRead and BytesRead describe the result set (chdb_result_rows_read
	// counts the rows in the result, despite its name).
	RowsRead, BytesRead uint64
	// StorageRowsRead and StorageBytesRead are what the query read from tables.
	StorageRowsRead, StorageBytesRead uint64
	// RowsWritten and BytesWritten count what an INSERT wrote, including rows
	// written by materialized views fed by the target table.
	RowsWritten, BytesWritten uint64
}

// DefaultFormat is the output format used when a format argument is empty
// (libchdb itself rejects an empty format for SELECT).
const DefaultFormat = "TabSeparated"

// Query runs sql and returns its output in format (any ClickHouse output
// format: "JSONEachRow", "TabSeparatedWithNames", "JSON", "CSVWithNames",
// "Pretty", "RowBinary", ...; empty means DefaultFormat). sql may hold several
// statements separated by ';' (their outputs are concatenated). The engine's
// error message is returned in an *EngineError.
//
// Data can be inlined after "INSERT ... FORMAT <fmt>" in text formats (a
// 47 MB JSONEachRow insert arrived whole, if ~7x slower than Insert), but not
// in binary ones: text with a NUL byte is refused with ErrNULInQuery. Use
// Insert for bulk loads.
func (e *Engine) Query(ctx context.Context, sql, format string) ([]byte, error) {
	r, err := e.Exec(ctx, sql, format, nil)
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// QueryWithParams runs a statement with server-side parameter binding:
// placeholders {name:Type} in sql take their values from params, given in
// ClickHouse's text form for Type (e.g. "42", "2024-01-02 03:04:05",
// "['a','b']"). Values are never interpolated into the SQL text, so they need
// no escaping and cannot inject SQL.
func (e *Engine) QueryWithParams(ctx context.Context, sql, format string, params map[string]string) ([]byte, error) {
	r, err := e.Exec(ctx, sql, format, params)
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// Exec is Query (params == nil) or QueryWithParams returning the full Result
// with the engine's statistics.
func (e *Engine) Exec(ctx context.Context, sql, format string, params map[string]string) (*Result, error) {
	if strings.IndexByte(sql, 0) >= 0 {
		return nil, ErrNULInQuery
	}
	if format == "" {
		format = DefaultFormat
	}
	if err := e.acquire(ctx); err != nil {
		return nil, err
	}
	defer e.release()

	var (
		r   *Result
		err error
	)
	e.thread.do(func() {
		var res unsafe.Pointer
		if params == nil {
			res = e.api.queryN(e.handle, strPtr(sql), uintptr(len(sql)), strPtr(format), uintptr(len(format)))
		} else {
			res = queryWithParams(e.api.queryWithParamsN, e.handle, sql, format, params)
		}
		runtime.KeepAlive(sql)
		runtime.KeepAlive(format)
		r, err = collect(e.api, res, "query", sql)
	})
	return r, err
}

// queryWithParams calls call (chdb_query_with_params_n or its streaming form) on the connection
// handle.
func queryWithParams(call func(conn unsafe.Pointer, q *byte, qlen uintptr, f *byte, flen uintptr,
	names **byte, nameLens *uintptr, values **byte, valueLens *uintptr, count uintptr) unsafe.Pointer,
	handle unsafe.Pointer, sql, format string, params map[string]string) unsafe.Pointer {
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	n := len(names)
	// Arrays of length >= 1 so &x[0] is valid even with no parameters.
	namePtrs := make([]*byte, n+1)
	nameLens := make([]uintptr, n+1)
	valPtrs := make([]*byte, n+1)
	valLens := make([]uintptr, n+1)
	vals := make([]string, n)
	for i, k := range names {
		vals[i] = params[k]
		namePtrs[i], nameLens[i] = strPtr(k), uintptr(len(k))
		valPtrs[i], valLens[i] = strPtr(vals[i]), uintptr(len(vals[i]))
	}
	res := call(handle, strPtr(sql), uintptr(len(sql)), strPtr(format), uintptr(len(format)),
		&namePtrs[0], &nameLens[0], &valPtrs[0], &valLens[0], uintptr(n))
	runtime.KeepAlive(names)
	runtime.KeepAlive(vals)
	runtime.KeepAlive(namePtrs)
	runtime.KeepAlive(nameLens)
	runtime.KeepAlive(valPtrs)
	runtime.KeepAlive(valLens)
	return res
}

// collect copies a chdb_result into a Result and destroys it.
func collect(a *api, res unsafe.Pointer, op, sql string) (*Result, error) {
	if res == nil {
		return nil, engineError(op, sql, errNilResult.Error())
	}
	defer a.destroyResult(res)
	if msg := a.resultError(res); msg != "" {
		return nil, engineError(op, sql, msg)
	}
	r := &Result{
		Elapsed:          time.Duration(a.resultElapsed(res) * float64(time.Second)),
		RowsRead:         a.resultRowsRead(res),
		BytesRead:        a.resultBytesRead(res),
		StorageRowsRead:  a.resultStorageRows(res),
		StorageBytesRead: a.resultStorageBytes(res),
		RowsWritten:      a.resultRowsWritten(res),
		BytesWritten:     a.resultBytesWritten(res),
	}
	n := a.resultLength(res)
	r.Data = make([]byte, n)
	if n > 0 {
		if buf := a.resultBuffer(res); buf != nil {
			copy(r.Data, unsafe.Slice(buf, n))
		}
	}
	return r, nil
}
