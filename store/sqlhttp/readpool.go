package sqlhttp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/chdb"
)

// ReadLimits bound what one untrusted read may cost. The engine enforces them: they are
// settings of a read-only connection, fixed when it is opened, which no query text can lift.
type ReadLimits struct {
	// MaxExecutionTime bounds one query (max_execution_time; default 30s). A query still
	// running a little after it (the engine checks between blocks) is killed.
	MaxExecutionTime time.Duration
	// MaxMemory bounds one query's memory (max_memory_usage; default 1 GiB, or less when
	// EngineMemory is small: the MaxConcurrent reads together take at most half of it).
	MaxMemory int64
	// EngineMemory is the engine's whole cap (0: not known), which the reads share with the
	// store writer's inserts and merges: reads that could take all of it would make the
	// writer's inserts fail.
	EngineMemory int64
	// MaxRowsToRead bounds the rows one query reads from tables (max_rows_to_read; default
	// 10 billion: a full scan of a large store passes, a runaway numbers() does not).
	MaxRowsToRead int64
	// MaxResultBytes bounds a result (max_result_bytes; default 256 MiB).
	MaxResultBytes int64
	// MaxConcurrent is how many reads run at once (default 2). They run on connections of
	// their own, so the store writer's connection is never behind them in a queue.
	MaxConcurrent int
	// QueueTimeout is how long a read waits for a free slot before it is refused with
	// ErrTooManyQueries (default 10s).
	QueueTimeout time.Duration
}

func (l *ReadLimits) defaults() {
	if l.MaxExecutionTime <= 0 {
		l.MaxExecutionTime = 30 * time.Second
	}

	if l.MaxRowsToRead <= 0 {
		l.MaxRowsToRead = 10_000_000_000
	}
	if l.MaxResultBytes <= 0 {
		l.MaxResultBytes = 256 << 20
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = 2
	}
	if l.MaxMemory <= 0 {
		l.MaxMemory = 1 << 30
		if l.EngineMemory > 0 {
			l.MaxMemory = min(l.MaxMemory, l.EngineMemory/2/int64(l.MaxConcurrent))
		}
	}
	if l.QueueTimeout <= 0 {
		l.QueueTimeout = 10 * time.Second
	}
}

// Errors of ReadPool.Run, besides the engine's own (*Error).
var (
	// ErrTooManyQueries: every slot stayed busy for QueueTimeout.
	ErrTooManyQueries = errors.New("store: too many simultaneous queries")
	// ErrNotARead: the engine's parser says the text is not exactly one read statement.
	ErrNotARead = errors.New("store: not a single read statement")
	// ErrUnparsable: the engine's parser found no statement in the text.
	ErrUnparsable = errors.New("store: the engine's parser found no statement")
)

// ReadQuery is one untrusted statement for ReadPool.Run.
type ReadQuery struct {
	Text     string
	Format   string            // output format ("" TabSeparated; a FORMAT clause in Text wins)
	Params   map[string]string // values of {name:Type} placeholders
	Database string            // current database ("" peertrail)
	// Settings are further settings the client asked for, each admitted by ClientSetting
	// (output formats and the like). They are fixed on a connection opened for this query
	// alone, beside the limits, which they cannot name.
	Settings [][2]string
	// Timeout, when shorter than MaxExecutionTime, bounds this query instead.
	Timeout time.Duration
}

// ReadPool runs untrusted read statements on the embedded engine.
//
// Enforcement is the engine's: every read runs on a connection opened with readonly=1 (no
// write, DDL, SET, SYSTEM, or table function that reaches files, URLs, other servers or
// processes, in any subquery; the old analyzer, because the new one lets a nested SETTINGS
// clause lift readonly) and with the limits fixed; the engine's parser
// (chdb_classify_query_n) refuses text that is not exactly one read statement, which also
// catches what readonly lets through (INTO OUTFILE, KILL). A connection whose statement
// failed or was cancelled is reopened before it serves anyone else. When the caller's ctx is
// done (the client went away, or the time is up) the statement is killed from a control
// connection of the pool's own.
//
// Concurrency: Run may be called from any number of goroutines; at most MaxConcurrent run
// at once. Lifecycle: Embedded.NewReadPool, Run, and Close before the Embedded is closed
// (Embedded.Close closes a pool still open).
type ReadPool struct {
	engine  *chdb.Engine
	limits  ReadLimits
	slots   chan struct{}
	idle    chan *chdb.Session // default sessions, reused
	control *chdb.Session      // runs KILL QUERY; not read-only, used by the pool alone
}

// readDatabase is the current database of reads unless a query names another.
const readDatabase = store.Database

// NewReadPool opens the pool's control connection on s's engine; read connections are opened
// as needed. s closes the pool before its engine.
func NewReadPool(ctx context.Context, s *store.Embedded, limits ReadLimits) (*ReadPool, error) {
	limits.defaults()
	control, err := s.Engine().OpenSession(ctx, chdb.SessionOptions{})
	if err != nil {
		return nil, fmt.Errorf("store: open the read pool's control connection: %w", err)
	}
	p := &ReadPool{
		engine: s.Engine(), limits: limits, control: control,
		slots: make(chan struct{}, limits.MaxConcurrent),
		idle:  make(chan *chdb.Session, limits.MaxConcurrent),
	}
	s.CloseFirst(p)
	return p, nil
}

// Limits are the pool's limits, defaults filled in.
func (p *ReadPool) Limits() ReadLimits { return p.limits }

// sessionSettings are a read connection's settings: the client's (which clientSetting has
// admitted, so none of them names a fixed one), then the fixed ones.
func (p *ReadPool) sessionSettings(extra [][2]string) [][2]string {
	l := p.limits
	out := append([][2]string(nil), extra...)
	return append(out,
		[2]string{"readonly", "1"},
		[2]string{"enable_analyzer", "0"},
		[2]string{"max_execution_time", strconv.FormatFloat(l.MaxExecutionTime.Seconds(), 'f', -1, 64)},
		[2]string{"timeout_overflow_mode", "throw"},
		[2]string{"max_memory_usage", strconv.FormatInt(l.MaxMemory, 10)},
		[2]string{"max_rows_to_read", strconv.FormatInt(l.MaxRowsToRead, 10)},
		[2]string{"read_overflow_mode", "throw"},
		[2]string{"max_result_bytes", strconv.FormatInt(l.MaxResultBytes, 10)},
		[2]string{"result_overflow_mode", "throw"},
	)
}

// Run runs q and returns its result. The error is ErrTooManyQueries, ErrNotARead (wrapped,
// with the class the parser gave), ctx's error when the query was cancelled, or the engine's
// *Error.
func (p *ReadPool) Run(ctx context.Context, q ReadQuery) (*chdb.Result, error) {
	wait := time.NewTimer(p.limits.QueueTimeout)
	defer wait.Stop()
	select {
	case p.slots <- struct{}{}:
	case <-wait.C:
		return nil, fmt.Errorf("%w: %d running, none finished within %s", ErrTooManyQueries, p.limits.MaxConcurrent, p.limits.QueueTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.slots }()

	db := q.Database
	if db == "" {
		db = readDatabase
	}
	for _, kv := range q.Settings {
		if !ClientSetting(kv[0], kv[1]) {
			return nil, fmt.Errorf("%w: setting %q cannot be set on a read", ErrNotARead, kv[0])
		}
	}
	pooled := len(q.Settings) == 0 && db == readDatabase
	var sess *chdb.Session
	if pooled {
		select {
		case sess = <-p.idle:
		default:
		}
	}
	if sess == nil {
		var err error
		sess, err = p.engine.OpenSession(ctx, chdb.SessionOptions{
			Settings: p.sessionSettings(q.Settings),
			Init:     []string{"USE " + store.QuoteIdent(db)},
		})
		if err != nil {
			return nil, store.EngineError("open a read connection", err)
		}
	}
	keep := false
	defer func() {
		if keep {
			select {
			case p.idle <- sess:
				return
			default:
			}
		}
		sess.Close()
	}()

	a, err := sess.Classify(ctx, q.Text)
	if err != nil {
		return nil, store.EngineError("classify", err)
	}
	if a.Statements == 0 {
		return nil, fmt.Errorf("%w (class %s)", ErrUnparsable, a.Class)
	}
	if a.Statements != 1 || a.Class != chdb.ClassReadOnly {
		return nil, fmt.Errorf("%w: the engine's parser found %d statement(s), class %s", ErrNotARead, a.Statements, a.Class)
	}

	timeout := p.limits.MaxExecutionTime
	if q.Timeout > 0 && q.Timeout < timeout {
		timeout = q.Timeout
	}
	// A little past the engine's own limit, so that its clearer error wins when it acts.
	qctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	marker := "/* peertrail-read " + newQueryID() + " */"
	kill := func() {
		kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer kcancel()
		// ASYNC: the SYNC form waits for the query, which may never come back.
		p.control.Exec(kctx, "KILL QUERY WHERE startsWith(query, "+store.QuoteString(marker)+") ASYNC", "", nil, nil, 5*time.Second)
	}
	res, err := sess.Exec(qctx, marker+"\n"+q.Text, q.Format, nilIfEmpty(q.Params), kill, 10*time.Second)
	if err != nil {
		if ctx.Err() == nil && qctx.Err() != nil {
			return nil, store.NewError("query", fmt.Sprintf("Code: 159. DB::Exception: Timeout exceeded: the query ran longer than %s and was killed. (TIMEOUT_EXCEEDED)", timeout))
		}
		if c := ctx.Err(); c != nil {
			return nil, c
		}
		return nil, store.EngineError("query", err)
	}
	keep = pooled
	return res, nil
}

// Close closes the pool's connections. Reads still running finish on their own connections,
// which close after them.
func (p *ReadPool) Close() error {
	for {
		select {
		case s := <-p.idle:
			s.Close()
		default:
			return p.control.Close()
		}
	}
}

// ClientSetting says whether a client may set a setting to value on a read of its own: output
// formats and the like, and fewer threads; nothing that would lift a limit, change readonly or
// reach outside the engine.
func ClientSetting(name, value string) bool {
	if name == "max_threads" {
		// Fewer threads than the engine's default, never more.
		n, err := strconv.Atoi(value)
		return err == nil && n >= 1 && n <= runtime.NumCPU()
	}
	for _, p := range []string{"output_format_", "format_", "date_time_output_format", "extremes", "join_use_nulls",
		"session_timezone", "use_client_time_zone", "aggregate_functions_null_for_empty"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
