// Package sqlhttp is the SQL front of the embedded store: the ClickHouse HTTP interface, served
// over the embedded engine (store.Embedded), so that Grafana's ClickHouse
// data source (grafana-clickhouse-datasource v4, protocol http), clickhouse-go (Protocol:
// clickhouse.HTTP), `peertrail sql` and curl can query the live store while `peertrail serve`
// holds it (the engine allows one process per data directory).
//
// It is read-only, and the engine enforces it (see ReadPool): one SELECT, WITH, SHOW, DESCRIBE,
// EXISTS or EXPLAIN statement per request, as the engine's parser counts and classifies it, run
// on a connection opened with readonly=1 and fixed limits, so no table function reaches files,
// URLs, other servers or processes and no query text lifts a limit. A client may set output
// format settings (a connection is opened for it with them) and a shorter max_execution_time;
// any other setting is refused. The subset of the protocol:
//
//   - GET or POST on /: the query in the `query` parameter and/or the POST body (joined with
//     a newline, as ClickHouse does); `default_format` (TabSeparated when absent; a FORMAT
//     clause in the query wins); `database` (the current database of the statement); query
//     parameters as `param_<name>` for {name:Type} placeholders; `query_id`; any other
//     parameter is a setting (max_execution_time, output_format_*, ...).
//   - `compress=1` compresses the result the ClickHouse way (LZ4 blocks, or ZSTD with
//     network_compression_method=ZSTD), which clickhouse-go's LZ4/ZSTD options expect;
//     `enable_http_compression=1` with Accept-Encoding gzip or deflate compresses it with HTTP.
//   - Auth (when a password is configured): X-ClickHouse-User/X-ClickHouse-Key headers,
//     basic auth, or the user/password parameters.
//   - GET /ping and /replicas_status answer "Ok.".
//   - Errors: the ClickHouse status codes, X-ClickHouse-Exception-Code and the text
//     "Code: N. DB::Exception: ...". The whole result is produced before the answer starts, so
//     an error is never in the middle of a 200.
//
// One quirk is deliberate. The engine writes the Native format in its protocol-revision-0
// layout (no block info, no per-column serialization flag), which a server writes for clients
// that do not send client_protocol_version. clickhouse-go sends it, and decodes every answer
// with the revision its connection hello reports (SELECT displayName(), version(), revision(),
// timezone()); the handler answers that one query itself, reporting revision 0, which makes
// clickhouse-go read exactly what the engine writes.
package sqlhttp

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	chcompress "github.com/ClickHouse/ch-go/compress"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/chdb"
	"github.com/peertrail/peertrail/store/sqltext"
)

// Options configure the ClickHouse HTTP interface.
type Options struct {
	// store.Database is the current database of statements when the request names none
	// (default "peertrail", so Grafana users can write FROM events).
	Database string
	// User and Password, when Password is set, must be presented by clients. Without a
	// password any user is accepted: serve it on loopback.
	User, Password string
	// Limits bound each query and how many run at once (see ReadLimits for the defaults).
	// A client may ask for a shorter max_execution_time, never a longer one.
	Limits ReadLimits
	// MaxQueryBytes bounds the query text (default 1 MiB).
	MaxQueryBytes int64
	// UnsafeAllowWrites runs any statement, and INSERT ... FORMAT with the data in the body.
	// It exists so that tests can drive the clickhouse-go server store against the embedded
	// engine; never turn it on where anyone else can connect.
	UnsafeAllowWrites bool
	Logger            *slog.Logger
}

func (o *Options) defaults() {
	if o.Database == "" {
		o.Database = store.Database
	}
	if o.MaxQueryBytes <= 0 {
		o.MaxQueryBytes = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Handler is the ClickHouse HTTP interface over an embedded engine. It is an
// http.Handler, safe for concurrent requests; mount it at the root of its own listener. Reads
// run in its ReadPool, which Close (or the Embedded's Close) closes.
type Handler struct {
	engine   *chdb.Engine
	reads    *ReadPool
	opts     Options
	queries  *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewHandler returns the ClickHouse HTTP interface over s's engine, with a ReadPool of
// opts.Limits.
func NewHandler(ctx context.Context, s *store.Embedded, opts Options) (*Handler, error) {
	opts.defaults()
	if opts.Limits.Logger == nil {
		opts.Limits.Logger = opts.Logger
	}
	reads, err := NewReadPool(ctx, s, opts.Limits)
	if err != nil {
		return nil, err
	}
	opts.Limits = reads.Limits()
	return &Handler{
		engine: s.Engine(),
		reads:  reads,
		opts:   opts,
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.StoreHTTPQueriesTotal,
			Help: "Queries to the ClickHouse HTTP interface, by result: ok, error (the engine failed it) or refused (not a read, bad request, authentication).",
		}, []string{metrics.LabelResult}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metrics.StoreHTTPQueryDurationSeconds,
			Help:    "Time to answer one query of the ClickHouse HTTP interface, waiting for the engine included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
	}, nil
}

// Close closes the handler's read connections.
func (h *Handler) Close() error { return h.reads.Close() }

// Collectors returns the handler's metrics.
func (h *Handler) Collectors() []prometheus.Collector {
	stuck := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metrics.StoreHTTPStuckReads,
		Help: "Reads of the ClickHouse HTTP interface the engine has not given back since they were killed: their slots are free, their connections are not.",
	}, func() float64 { return float64(h.reads.Stuck()) })
	return []prometheus.Collector{h.queries, h.duration, stuck}
}

// ClickHouse error codes the handler uses or maps to HTTP statuses.
const (
	codeUnknownTable       = 60
	codeSyntaxError        = 62
	codeUnknownDatabase    = 81
	codeReadonly           = 164
	codeRequiredPassword   = 194
	codeAuthFailed         = 516
	codeUnknownFormat      = 73
	codeBadArguments       = 36
	codeUnknownSetting     = 115
	codeUnknownParameter   = 456
	codeTooLarge           = 307 // TOO_LARGE_STRING_SIZE, used for an oversized query
	codeNoSuchColumn       = 16
	codeUnknownIdentifier  = 47
	codeAccessDenied       = 497
	codeTooManyQueries     = 202
	codeTooManyRowsOrBytes = 396
)

// httpError is an error answer: a ClickHouse code and text.
type httpError struct {
	code int
	name string
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func refuse(code int, name, format string, args ...any) *httpError {
	return &httpError{code: code, name: name, msg: fmt.Sprintf(format, args...)}
}

// statusOf maps a ClickHouse error code to the HTTP status a server answers with.
func statusOf(code int) int {
	switch code {
	case codeRequiredPassword:
		return http.StatusUnauthorized
	case codeTooManyQueries:
		return http.StatusServiceUnavailable
	case codeAuthFailed, codeReadonly, codeAccessDenied, 192, 193:
		return http.StatusForbidden
	case codeUnknownTable, codeUnknownDatabase:
		return http.StatusNotFound
	case codeSyntaxError, codeUnknownFormat, codeBadArguments, codeUnknownSetting, codeUnknownParameter,
		codeNoSuchColumn, codeUnknownIdentifier, codeTooLarge, 6, 27, 42, 43, 46, 53, 70, 457:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// reservedParams are protocol parameters, not settings.
var reservedParams = map[string]bool{
	"query": true, "database": true, "default_format": true, "client_protocol_version": true,
	"query_id": true, "quota_key": true, "user": true, "password": true, "session_id": true,
	"session_timeout": true, "session_check": true, "compress": true, "decompress": true,
	"enable_http_compression": true, "wait_end_of_query": true, "buffer_size": true,
	"readonly": true, "stacktrace": true, "http_native_compression_disable_checksumming_on_decompress": true,
	"network_compression_method": true, "network_zstd_compression_level": true,
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// helloQuery is clickhouse-go's connection hello over HTTP (see the package comment on the
// Native revision).
const helloQuery = "SELECT displayName(), version(), revision(), timezone()"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ping", "/replicas_status":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		io.WriteString(w, "Ok.\n")
		return
	case "/", "/query":
	default:
		h.fail(w, "refused", refuse(codeUnknownTable, "UNKNOWN_HANDLER", "There is no handle %s. Use / for queries, /ping for a health check", r.URL.Path))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	start := time.Now()
	result, err := h.serve(w, r)
	h.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		h.fail(w, result, err)
		return
	}
	h.queries.WithLabelValues(metrics.ResultOK).Inc()
}

// fail writes err the way ClickHouse does.
func (h *Handler) fail(w http.ResponseWriter, result string, err error) {
	code, name, msg := 0, "", err.Error()
	var he *httpError
	var se *store.Error
	switch {
	case errors.As(err, &he):
		code, name, msg = he.code, he.name, "Code: "+strconv.Itoa(he.code)+". DB::Exception: "+he.msg+". ("+he.name+")"
	case errors.As(err, &se):
		code, name, msg = se.Code, se.Name, se.Message
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code, name = 394, "QUERY_WAS_CANCELLED"
		msg = "Code: 394. DB::Exception: " + err.Error() + ". (QUERY_WAS_CANCELLED)"
	}
	if result == "" {
		result = metrics.ResultError
	}
	h.queries.WithLabelValues(result).Inc()
	h.opts.Logger.Debug("store: HTTP query failed", "code", code, "name", name, "err", msg)
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if code != 0 {
		w.Header().Set("X-ClickHouse-Exception-Code", strconv.Itoa(code))
	}
	w.WriteHeader(statusOf(code))
	io.WriteString(w, strings.TrimRight(msg, "\n")+"\n")
}

// serve runs one query; on error it returns the metrics result label and the error.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) (string, error) {
	params := r.URL.Query()
	if err := h.authenticate(r, params); err != nil {
		return metrics.ResultRefused, err
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.HasPrefix(ct, "multipart/") {
		return metrics.ResultRefused, refuse(codeBadArguments, "BAD_ARGUMENTS", "external tables (multipart requests) are not supported")
	}
	if params.Get("decompress") == "1" {
		return metrics.ResultRefused, refuse(codeBadArguments, "BAD_ARGUMENTS", "decompress=1 (a compressed request body) is not supported")
	}
	text := params.Get("query")
	var body []byte
	if r.Method == http.MethodPost {
		var err error
		if body, err = h.readBody(r); err != nil {
			return metrics.ResultRefused, err
		}
	}
	insert := false
	if h.opts.UnsafeAllowWrites && text != "" && len(body) > 0 && isInsert(text) {
		insert = true // the body is the data
	} else if len(body) > 0 {
		if text != "" {
			text += "\n"
		}
		text += string(body)
		body = nil
	}
	if int64(len(text)) > h.opts.MaxQueryBytes {
		return metrics.ResultRefused, refuse(codeTooLarge, "QUERY_IS_TOO_LARGE", "the query is %d bytes, more than the limit of %d", len(text), h.opts.MaxQueryBytes)
	}
	if strings.TrimSpace(text) == "" {
		return metrics.ResultRefused, refuse(codeSyntaxError, "SYNTAX_ERROR", "Empty query")
	}

	queryParams := map[string]string{}
	var settings [][2]string
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	var timeout time.Duration
	for _, k := range names {
		v := params.Get(k)
		switch {
		case strings.HasPrefix(k, "param_"):
			queryParams[strings.TrimPrefix(k, "param_")] = v
		case reservedParams[k]:
		case k == "max_execution_time":
			// Honoured when lower than the pool's limit, by killing the query (a read-only
			// connection cannot change its own setting).
			if t, err := strconv.ParseFloat(v, 64); err == nil && t > 0 {
				timeout = time.Duration(t * float64(time.Second))
			}
		case !settingName.MatchString(k):
			return metrics.ResultRefused, refuse(codeUnknownSetting, "UNKNOWN_SETTING", "bad setting name %q", k)
		case h.opts.UnsafeAllowWrites || ClientSetting(k, v):
			settings = append(settings, [2]string{k, v})
		default:
			return metrics.ResultRefused, refuse(codeReadonly, "READONLY",
				"setting %s=%q cannot be set on peertrail's read-only SQL interface (these can, within bounds: %s)", k, v, strings.Join(ClientSettings(), ", "))
		}
	}
	if db := params.Get("database"); db != "" && !settingName.MatchString(db) {
		return metrics.ResultRefused, refuse(codeUnknownDatabase, "UNKNOWN_DATABASE", "bad database name %q", db)
	}
	database := h.opts.Database
	if db := params.Get("database"); db != "" {
		database = db
	}

	format := params.Get("default_format")
	if format == "" {
		format = chdb.DefaultFormat
	}
	if !settingName.MatchString(format) {
		return metrics.ResultRefused, refuse(codeUnknownFormat, "UNKNOWN_FORMAT", "bad format name %q", format)
	}

	var res *chdb.Result
	var err error
	queryID := params.Get("query_id")
	if queryID == "" {
		queryID = newQueryID()
	}
	ctx := r.Context()
	if f := sqltext.FormatClause(text); f != "" && (insert || h.opts.UnsafeAllowWrites) {
		format = f
	}
	if stmt := strings.TrimSuffix(strings.TrimSpace(text), ";"); strings.Join(strings.Fields(stmt), " ") == helloQuery && strings.EqualFold(format, "Native") {
		res, err := h.hello(ctx)
		if err != nil {
			return metrics.ResultError, err
		}
		return metrics.ResultError, h.write(w, r, params, format, queryID, res)
	}
	switch {
	case insert:
		res, err = h.insert(ctx, text, settings, body)
	case h.opts.UnsafeAllowWrites:
		var set strings.Builder
		for _, kv := range settings {
			set.WriteString(", " + kv[0] + " = " + store.QuoteString(kv[1]))
		}
		stmt := text
		if set.Len() > 0 {
			stmt += "\nSETTINGS " + set.String()[2:]
		}
		res, err = h.engine.Exec(ctx, "USE "+store.QuoteIdent(database)+";\n"+stmt, format, nilIfEmpty(queryParams))
	default:
		var read *ReadResult
		read, err = h.reads.Run(ctx, ReadQuery{Text: text, Format: format, Params: queryParams,
			Database: database, Settings: settings, Timeout: timeout})
		switch {
		case errors.Is(err, ErrUnparsable):
			return metrics.ResultRefused, refuse(codeSyntaxError, "SYNTAX_ERROR", "%v", err)
		case errors.Is(err, ErrNotARead):
			return metrics.ResultRefused, refuse(codeReadonly, "READONLY",
				"peertrail's SQL interface is read-only: it runs exactly one SELECT, DESCRIBE, EXPLAIN, SHOW DATABASES or SHOW TABLES statement (%v)", err)
		case errors.Is(err, ErrNotAllowed):
			return metrics.ResultRefused, refuse(codeAccessDenied, "ACCESS_DENIED", "%v", err)
		case errors.Is(err, ErrResultTooLarge):
			return metrics.ResultRefused, refuse(codeTooManyRowsOrBytes, "TOO_MANY_ROWS_OR_BYTES", "%v: ask for fewer rows or columns (LIMIT), or a leaner format", err)
		case errors.Is(err, ErrTooManyQueries):
			return metrics.ResultRefused, refuse(codeTooManyQueries, "TOO_MANY_SIMULTANEOUS_QUERIES", "%v", err)
		case err != nil:
			return metrics.ResultError, err
		}
		res, format = read.Result, read.Format
	}
	if err != nil {
		return metrics.ResultError, store.EngineError("query", err)
	}
	h.opts.Logger.Debug("store: HTTP query", "query_id", queryID, "rows", res.RowsRead, "bytes", len(res.Data), "elapsed", res.Elapsed)
	return metrics.ResultError, h.write(w, r, params, format, queryID, res)
}

// hello answers clickhouse-go's connection hello. clickhouse-go decodes this one answer with
// its own protocol revision (block info and per-column serialization flags), and every later
// one with the revision it reports; the engine writes the revision-0 layout, so the answer is
// built here, in the layout the client expects, reporting revision 0.
func (h *Handler) hello(ctx context.Context) (*chdb.Result, error) {
	out, err := h.engine.Query(ctx, "SELECT displayName(), version(), timezone()", "TabSeparated")
	if err != nil {
		return nil, store.EngineError("query", err)
	}
	f := strings.Split(strings.TrimSuffix(string(out), "\n"), "\t")
	if len(f) != 3 {
		return nil, fmt.Errorf("store: unexpected engine identity %q", out)
	}
	b := []byte{1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0} // block info: not overflows, bucket -1
	b = append(b, 4, 1)                             // 4 columns, 1 row
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	for _, c := range []struct{ name, typ, value string }{
		{"displayName()", "String", f[0]}, {"version()", "String", f[1]}, {"revision()", "UInt32", ""}, {"timezone()", "String", f[2]},
	} {
		b = str(b, c.name)
		b = str(b, c.typ)
		b = append(b, 0) // no custom serialization
		if c.typ == "UInt32" {
			b = binary.LittleEndian.AppendUint32(b, 0)
		} else {
			b = str(b, c.value)
		}
	}
	return &chdb.Result{Data: b, RowsRead: 1}, nil
}

// authenticate checks the credentials when a password is configured.
func (h *Handler) authenticate(r *http.Request, params map[string][]string) error {
	if h.opts.Password == "" {
		return nil
	}
	user, pass := r.Header.Get("X-ClickHouse-User"), r.Header.Get("X-ClickHouse-Key")
	if u, p, ok := r.BasicAuth(); ok {
		user, pass = u, p
	}
	if v := params["user"]; len(v) > 0 {
		user = v[0]
	}
	if v := params["password"]; len(v) > 0 {
		pass = v[0]
	}
	if user == "" && pass == "" {
		return refuse(codeRequiredPassword, "REQUIRED_PASSWORD", "a user and password are required")
	}
	wantUser := h.opts.User
	if wantUser == "" {
		wantUser = "default"
	}
	if user == "" {
		user = "default"
	}
	okUser := subtle.ConstantTimeCompare([]byte(user), []byte(wantUser)) == 1
	okPass := subtle.ConstantTimeCompare([]byte(pass), []byte(h.opts.Password)) == 1
	if !okUser || !okPass {
		return refuse(codeAuthFailed, "AUTHENTICATION_FAILED", "%s: Authentication failed: password is incorrect, or there is no user with such name", user)
	}
	return nil
}

func (h *Handler) readBody(r *http.Request) ([]byte, error) {
	var src io.Reader = r.Body
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, refuse(codeBadArguments, "BAD_ARGUMENTS", "gzip request body: %v", err)
		}
		defer zr.Close()
		src = zr
	case "deflate":
		zr, err := zlib.NewReader(r.Body)
		if err != nil {
			return nil, refuse(codeBadArguments, "BAD_ARGUMENTS", "deflate request body: %v", err)
		}
		defer zr.Close()
		src = zr
	default:
		return nil, refuse(codeBadArguments, "BAD_ARGUMENTS", "unsupported Content-Encoding %q", enc)
	}
	limit := h.opts.MaxQueryBytes
	if h.opts.UnsafeAllowWrites {
		limit = 1 << 30 // insert data
	}
	b, err := io.ReadAll(io.LimitReader(src, limit+1))
	if err != nil {
		return nil, refuse(codeBadArguments, "BAD_ARGUMENTS", "reading the request body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, refuse(codeTooLarge, "QUERY_IS_TOO_LARGE", "the request body is more than %d bytes", limit)
	}
	return b, nil
}

var insertFormat = regexp.MustCompile(`(?is)^\s*(INSERT\s+INTO\s+.*?)\s+FORMAT\s+([A-Za-z0-9_]+)\s*$`)

func isInsert(q string) bool { return insertFormat.MatchString(q) }

// settingsClause finds an INSERT's own SETTINGS clause after its column list.
var settingsClause = regexp.MustCompile(`(?is)\)\s+SETTINGS\s+[a-z_]+\s*=`)

// insert streams data into the INSERT of text (UnsafeAllowWrites), with the request's settings,
// as a ClickHouse server applies the settings of the URL to the insert
// (insert_deduplication_token, for one).
func (h *Handler) insert(ctx context.Context, text string, settings [][2]string, data []byte) (*chdb.Result, error) {
	m := insertFormat.FindStringSubmatch(text)
	stmt := m[1]
	sep := " SETTINGS "
	if settingsClause.MatchString(stmt) {
		sep = ", " // the statement has settings of its own (store's inserts: optimize_on_insert)
	}
	for _, kv := range settings {
		stmt += sep + kv[0] + " = " + store.QuoteString(kv[1])
		sep = ", "
	}
	return h.engine.Insert(ctx, stmt, m[2], bytes.NewReader(data))
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func newQueryID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// contentType is what ClickHouse sends for a format.
func contentType(format string) string {
	f := strings.ToLower(format)
	switch {
	case strings.HasPrefix(f, "json"):
		return "application/json; charset=UTF-8"
	case strings.HasPrefix(f, "tabseparated"), strings.HasPrefix(f, "tsv"):
		return "text/tab-separated-values; charset=UTF-8"
	case strings.HasPrefix(f, "csv"):
		return "text/csv; charset=UTF-8; header=present"
	case f == "native", strings.HasPrefix(f, "rowbinary"), f == "parquet", f == "arrow", f == "arrowstream", f == "orc", f == "avro":
		return "application/octet-stream"
	case f == "xml":
		return "application/xml; charset=UTF-8"
	}
	return "text/plain; charset=UTF-8"
}

// write sends a result, compressed as asked.
func (h *Handler) write(w http.ResponseWriter, r *http.Request, params map[string][]string, format, queryID string, res *chdb.Result) error {
	get := func(k string) string {
		if v := params[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	hd := w.Header()
	hd.Set("Content-Type", contentType(format))
	hd.Set("X-ClickHouse-Format", format)
	hd.Set("X-ClickHouse-Query-Id", queryID)
	hd.Set("X-ClickHouse-Timezone", "UTC")
	hd.Set("X-ClickHouse-Server-Display-Name", "peertrail")
	summary, _ := json.Marshal(map[string]string{
		"read_rows":     strconv.FormatUint(res.StorageRowsRead, 10),
		"read_bytes":    strconv.FormatUint(res.StorageBytesRead, 10),
		"written_rows":  strconv.FormatUint(res.RowsWritten, 10),
		"written_bytes": strconv.FormatUint(res.BytesWritten, 10),
		"result_rows":   strconv.FormatUint(res.RowsRead, 10),
		"result_bytes":  strconv.FormatUint(res.BytesRead, 10),
		"elapsed_ns":    strconv.FormatInt(res.Elapsed.Nanoseconds(), 10),
	})
	hd.Set("X-ClickHouse-Summary", string(summary))

	data := res.Data
	if get("compress") == "1" {
		method := chcompress.LZ4
		if strings.EqualFold(get("network_compression_method"), "ZSTD") {
			method = chcompress.ZSTD
		}
		var err error
		if data, err = nativeCompress(data, method); err != nil {
			return err
		}
	}
	var out io.Writer = w
	if get("enable_http_compression") == "1" {
		accept := strings.ToLower(r.Header.Get("Accept-Encoding"))
		switch {
		case strings.Contains(accept, "gzip"):
			hd.Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		case strings.Contains(accept, "deflate"):
			hd.Set("Content-Encoding", "deflate")
			zw := zlib.NewWriter(w)
			defer zw.Close()
			out = zw
		}
	}
	if hd.Get("Content-Encoding") == "" {
		hd.Set("Content-Length", strconv.Itoa(len(data)))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	_, err := out.Write(data)
	if err != nil {
		// The status is out; all that is left is to stop.
		h.opts.Logger.Debug("store: HTTP answer cut short", "err", err)
	}
	return nil
}

// nativeCompress frames data as ClickHouse's compressed blocks (what compress=1 asks for).
func nativeCompress(data []byte, method chcompress.Method) ([]byte, error) {
	const block = 1 << 20 // ClickHouse's max_compress_block_size
	zw := chcompress.NewWriter(chcompress.LevelZero, method)
	var out []byte
	for len(data) > 0 {
		n := min(len(data), block)
		if err := zw.Compress(data[:n]); err != nil {
			return nil, fmt.Errorf("compress the result: %w", err)
		}
		out = append(out, zw.Data...)
		data = data[n:]
	}
	return out, nil
}
