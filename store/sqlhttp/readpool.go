package sqlhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
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
	// Logger says when a killed read does not stop (nil: nothing is logged).
	Logger *slog.Logger
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
	Format   string            // output format ("" TabSeparated; a FORMAT clause in Text wins); see AllowedFormats
	Params   map[string]string // values of {name:Type} placeholders
	Database string            // current database: "" or peertrail (any other is refused)
	// Settings are further settings the client asked for, each admitted by ClientSetting
	// (how the output is written, fewer threads). They are fixed on a connection opened for
	// this query alone, beside the limits, which they cannot name.
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
// at once. Lifecycle: NewReadPool, Run, and Close before the Embedded is closed
// (Embedded.Close closes a pool still open).
type ReadPool struct {
	engine  *chdb.Engine
	limits  ReadLimits
	policy  *Policy
	slots   chan struct{}
	idle    chan *chdb.Session // default sessions, reused
	control *chdb.Session      // runs KILL QUERY; not read-only, used by the pool alone
	// stuck counts reads the engine did not give back when killed: their slot is free, their
	// connection closes whenever the engine returns.
	stuck  atomic.Int64
	logger *slog.Logger
	// unchecked skips the Policy (tests of what the pool does with a read that gets past it).
	unchecked bool
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
	policy, err := LoadPolicy(ctx, control)
	if err != nil {
		control.Close()
		return nil, err
	}
	p := &ReadPool{
		engine: s.Engine(), limits: limits, control: control, policy: policy,
		slots:  make(chan struct{}, limits.MaxConcurrent),
		idle:   make(chan *chdb.Session, limits.MaxConcurrent),
		logger: slog.New(slog.DiscardHandler),
	}
	if limits.Logger != nil {
		p.logger = limits.Logger
	}
	s.CloseFirst(p)
	return p, nil
}

// Limits are the pool's limits, defaults filled in.
func (p *ReadPool) Limits() ReadLimits { return p.limits }

// sessionSettings are a read connection's settings: the client's (which ClientSetting has
// admitted, so none of them names a fixed one), then the fixed ones.
func (p *ReadPool) sessionSettings(extra [][2]string) [][2]string {
	l := p.limits
	out := append([][2]string(nil), extra...)
	return append(out,
		[2]string{"readonly", "1"},
		[2]string{"enable_analyzer", "0"},
		[2]string{"allow_introspection_functions", "0"},
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
// with the class the parser gave), ErrNotAllowed (wrapped, with what the Policy refused),
// ErrResultTooLarge, ctx's error when the query was cancelled, or the engine's *Error.
//
// A read the engine does not give back when it is killed (a read stuck in a system call, which
// no KILL reaches) gives up its slot all the same: its connection is closed whenever the
// engine returns, and Stuck counts it meanwhile.
func (p *ReadPool) Run(ctx context.Context, q ReadQuery) (*ReadResult, error) {
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
	if db != readDatabase {
		return nil, fmt.Errorf("%w: the database %s (reads run in %s; name another database's allowed tables in the query)", ErrNotAllowed, db, readDatabase)
	}
	for _, kv := range q.Settings {
		if !ClientSetting(kv[0], kv[1]) {
			return nil, fmt.Errorf("%w: the setting %s=%q (allowed: %s)", ErrNotAllowed, kv[0], kv[1], strings.Join(ClientSettings(), ", "))
		}
	}
	pooled := len(q.Settings) == 0
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
	keep, stuck := false, false
	defer func() {
		switch {
		case stuck:
			p.stuck.Add(1)
			go func() { sess.Close(); p.stuck.Add(-1) }()
			return
		case keep:
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

	text, format, inText, stream := q.Text, q.Format, false, true
	if !p.unchecked {
		st, err := p.check(qctx, sess, text, q.Params)
		if err != nil {
			return nil, err
		}
		if st.Format != "" {
			format, inText = st.Format, true
		}
		stream = st.Select
	}
	if format == "" {
		format = chdb.DefaultFormat
	}
	spec, err := formatOf(format)
	if err != nil {
		return nil, err
	}
	if !stream {
		// DESCRIBE, EXPLAIN and SHOW: the engine does not stream them; their answers are
		// small, and are held to the same bound once whole.
		spec = formatSpec{name: spec.name, engine: spec.name}
	}
	if stream && inText && spec.engine != spec.name {
		// The statement names a format the engine is asked for in another form (a JSON
		// document is joined here from rows): run it without its FORMAT clause.
		if text, err = p.withoutFormat(qctx, sess, text, q.Params, format); err != nil {
			return nil, err
		}
	}

	marker := "/* peertrail-read " + newQueryID() + " */"
	kill := func() {
		kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer kcancel()
		// ASYNC: the SYNC form waits for the query, which may never come back.
		p.control.Exec(kctx, "KILL QUERY WHERE startsWith(query, "+store.QuoteString(marker)+") ASYNC", "", nil, nil, 5*time.Second)
	}
	var screen uint64
	for _, kv := range q.Settings {
		if kv[0] == "output_format_pretty_max_rows" {
			screen, _ = strconv.ParseUint(kv[1], 10, 64)
		}
	}
	out := newResult(spec, p.limits.MaxResultBytes, screen)
	var res *chdb.Result
	if stream {
		res, err = sess.Stream(qctx, marker+"\n"+text, spec.engine, nilIfEmpty(q.Params), out.add, kill, 10*time.Second)
	} else if res, err = sess.Exec(qctx, marker+"\n"+text, spec.engine, nilIfEmpty(q.Params), kill, 10*time.Second); err == nil {
		if _, err = out.Write(res.Data); err == nil {
			res.Data = nil
		}
	}
	if err != nil {
		if errors.Is(err, chdb.ErrBusy) {
			stuck = true
			p.logger.Warn("store: a killed SQL read did not stop; its slot is free, its connection closes when the engine returns it", "stuck", p.stuck.Load()+1)
		}
		if errors.Is(err, ErrResultTooLarge) {
			return nil, err
		}
		if ctx.Err() == nil && qctx.Err() != nil {
			return nil, store.NewError("query", fmt.Sprintf("Code: 159. DB::Exception: Timeout exceeded: the query ran longer than %s and was killed. (TIMEOUT_EXCEEDED)", timeout))
		}
		if c := ctx.Err(); c != nil {
			return nil, c
		}
		return nil, store.EngineError("query", err)
	}
	if res.Data == nil {
		res.Data = out.bytes(res.Elapsed, res.StorageRowsRead, res.StorageBytesRead)
	}
	keep = pooled
	return &ReadResult{Result: res, Format: spec.name}, nil
}

// ReadResult is a read's output, whole, and the format it is in.
type ReadResult struct {
	*chdb.Result
	Format string
}

// Stuck is how many reads the engine has not given back since they were killed.
func (p *ReadPool) Stuck() int64 { return p.stuck.Load() }

// check holds text to the Policy, on the tree the engine's parser makes of it.
func (p *ReadPool) check(ctx context.Context, sess *chdb.Session, text string, params map[string]string) (Statement, error) {
	res, err := sess.Exec(ctx, "EXPLAIN AST "+text, "TabSeparatedRaw", nilIfEmpty(params), nil, 0)
	if err != nil {
		return Statement{}, store.EngineError("parse", err)
	}
	tree := strings.Split(strings.TrimSuffix(string(res.Data), "\n"), "\n")
	return p.policy.Check(tree, func() (string, error) { return formatted(ctx, sess, text) })
}

// formatted is the engine's own single-line rendering of text.
func formatted(ctx context.Context, sess *chdb.Session, text string) (string, error) {
	res, err := sess.Exec(ctx, "SELECT formatQuerySingleLine({q:String})", "TabSeparatedRaw", map[string]string{"q": text}, nil, 0)
	if err != nil {
		return "", store.EngineError("format", err)
	}
	return strings.TrimSuffix(string(res.Data), "\n"), nil
}

// withoutFormat returns text without its FORMAT clause, as the engine renders it, checked again.
func (p *ReadPool) withoutFormat(ctx context.Context, sess *chdb.Session, text string, params map[string]string, format string) (string, error) {
	f, err := formatted(ctx, sess, text)
	if err != nil {
		return "", err
	}
	suffix := " FORMAT " + format
	if len(f) <= len(suffix) || !strings.EqualFold(f[len(f)-len(suffix):], suffix) {
		return "", fmt.Errorf("%w: the statement's FORMAT clause could not be told apart (%q)", ErrNotAllowed, f)
	}
	f = f[:len(f)-len(suffix)]
	st, err := p.check(ctx, sess, f, params)
	if err != nil {
		return "", err
	}
	if st.Format != "" {
		return "", fmt.Errorf("%w: the statement's FORMAT clause could not be told apart (%q)", ErrNotAllowed, f)
	}
	return f, nil
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
