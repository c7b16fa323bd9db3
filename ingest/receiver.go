// Package ingest is the audit webhook receiver that every kube-apiserver posts its
// audit.k8s.io/v1 EventLists to. It establishes which apiserver sent a batch, decodes and
// normalises its events, drops the ones it already has, and appends the rest to the spool
// before it answers 200, so an acknowledged event is never lost and never stored twice.
//
// Answers follow what the apiserver's webhook client does with them: it retries a whole batch
// on any error, so a batch with some bad items is still acknowledged (the bad items go to the
// dead-letter files), and only faults the sender can fix or outlast get an error.
package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/ingest/dedup"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/bufpool"
	"github.com/peertrail/peertrail/metrics"
)

// Options configure a Receiver.
type Options struct {
	// APIServers are the names of the apiservers allowed to send; others are refused with 403
	// unless AcceptUnknown.
	APIServers    []string
	AcceptUnknown bool
	// MaxUnknownAPIServers bounds, with AcceptUnknown, how many names not in APIServers are
	// taken in the receiver's life: anyone may make names up, and each adds metric series and
	// state the gate judges. A new name past it is refused 403. 0: DefaultMaxUnknownAPIServers.
	MaxUnknownAPIServers int
	// Auth tells which apiserver a request's credential (client certificate or token) names,
	// and refuses readers' credentials. nil: no credential is known (trials on loopback).
	Auth *Authenticator
	// RequireAuth refuses (401) requests without an apiserver's credential. It is on whenever
	// an apiserver CA or token is configured.
	RequireAuth bool
	// MaxBodyBytes bounds a body, both as received and after gzip decoding.
	MaxBodyBytes int64
	// MaxBatchItems bounds the items of one EventList: a longer one is refused 413 before any
	// item is decoded (body limits count bytes, and a tiny item costs far more decoded than
	// sent). 0: record.DefaultMaxItems.
	MaxBatchItems int
	// MaxInflight bounds the batches processed (decoded, deduplicated, spooled) at once; a
	// slot is taken only once a body is read, so slow senders cannot hold one. Beyond it, 503.
	MaxInflight int
	// MaxInflightPerSender bounds one apiserver's requests being read or processed at once,
	// so that one sender (slow, hostile or broken) can never take the others' turn; beyond it,
	// 503 to that sender only. 0: MaxInflight / len(APIServers) + 1.
	MaxInflightPerSender int
	// MaxReadingBytes bounds the memory of the bodies being read and processed, all senders
	// together (decoded size, and decodedItemBytes for each item of a batch being decoded); a
	// body that would take more is refused 503. 0: 8 x MaxBodyBytes.
	MaxReadingBytes int64
	// ReadTimeout bounds reading one request body.
	ReadTimeout time.Duration
	// RetryAfter is the delay suggested with a 503.
	RetryAfter time.Duration
	// Redaction names the resources whose objects are dropped at decode (record.Redaction).
	// nil: record.DefaultRedacted.
	Redaction *record.Redaction
}

// Receiver is the webhook endpoint. Create it with NewReceiver; it is an http.Handler for
// POST /audit/{apiserver} and POST /audit (sender named by its certificate or token alone), safe
// for concurrent requests. Each request is authenticated from its handshake and headers before
// any of its body is read: an apiserver's credential posts under that apiserver's name only, a
// reader's is refused. Then it takes one of its sender's turns (MaxInflightPerSender), reads
// the body within ReadTimeout and the shared MaxReadingBytes, and only then takes one of the
// MaxInflight processing slots.
type Receiver struct {
	opts   Options
	known  map[string]bool
	spool  *spool.Spool
	index  *dedup.Index
	codec  *record.Codec
	dead   *DeadLetters
	log    *slog.Logger
	m      *receiverMetrics
	slots  chan struct{}
	now    func() time.Time
	commit sync.Mutex // makes duplicate check and spool append one step

	lastMu sync.Mutex
	last   map[string]time.Time // last accepted batch per apiserver
	first  map[string]time.Time // first accepted batch per apiserver

	// unknown are the names not configured that were taken (Options.MaxUnknownAPIServers);
	// unknownFull says the limit was reached and logged.
	unknownMu   sync.Mutex
	unknown     map[string]bool
	unknownFull bool

	// perSender counts each apiserver's requests being read or processed (Options.
	// MaxInflightPerSender); reading is the byte budget of bodies in memory.
	senderMu  sync.Mutex
	perSender map[string]int
	reading   *byteBudget

	// refusedMu guards refused, the last append the spool refused, until one succeeds: Ready
	// reports it while its cause lasts.
	refusedMu sync.Mutex
	refused   *refusal

	// bodies, frames and batches recycle request bodies, encoded frames and the decoded
	// batches with their keys: a batch is a third of a megabyte, 25 a second.
	bodies, frames *bufpool.Pool
	batches        *bufpool.Free[*batchMem]
}

// batchMem is the memory one batch is decoded into, reused by a later batch once this one is
// answered.
type batchMem struct {
	dec    *record.Decoder
	keys   []record.Key
	stamps []int64
}

// DefaultMaxUnknownAPIServers is how many names not configured a trial takes: a control plane
// of a few apiservers, replaced under new names as an upgrade goes, with room to spare.
const DefaultMaxUnknownAPIServers = 32

// pooledBuffers is how many bodies, frames and decoded batches are kept for reuse: more than
// the batches in flight at once from a control plane's apiservers.
const pooledBuffers = 8

// NewReceiver returns a receiver writing to sp, remembering keys in ix and dead letters in dl.
// It does not own them: the caller closes them after the receiver's server has stopped.
func NewReceiver(opts Options, sp *spool.Spool, ix *dedup.Index, codec *record.Codec, dl *DeadLetters, log *slog.Logger) *Receiver {
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 64
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = time.Second
	}
	if opts.MaxInflightPerSender <= 0 {
		opts.MaxInflightPerSender = min(opts.MaxInflight/max(len(opts.APIServers), 1)+1, opts.MaxInflight)
	}
	if opts.MaxBatchItems <= 0 {
		opts.MaxBatchItems = record.DefaultMaxItems
	}
	if opts.MaxUnknownAPIServers <= 0 {
		opts.MaxUnknownAPIServers = DefaultMaxUnknownAPIServers
	}
	if opts.MaxReadingBytes <= 0 {
		opts.MaxReadingBytes = 8 * opts.MaxBodyBytes
	}
	// One body of the largest size, with the most items, must always fit, or it could never
	// be accepted.
	opts.MaxReadingBytes = max(opts.MaxReadingBytes, opts.MaxBodyBytes+1+int64(opts.MaxBatchItems)*decodedItemBytes)
	known := make(map[string]bool, len(opts.APIServers))
	for _, n := range opts.APIServers {
		known[n] = true
	}
	return &Receiver{
		opts: opts, known: known, spool: sp, index: ix, codec: codec, dead: dl, log: log,
		m: newReceiverMetrics(), slots: make(chan struct{}, opts.MaxInflight), now: time.Now,
		last: map[string]time.Time{}, first: map[string]time.Time{}, unknown: map[string]bool{},
		perSender: map[string]int{}, reading: newByteBudget(opts.MaxReadingBytes),
		bodies: bufpool.New(pooledBuffers, maxPooledBody),
		frames: bufpool.New(pooledBuffers, maxPooledBody),
		batches: bufpool.NewFree(pooledBuffers, func(m *batchMem) bool {
			return m.dec.Footprint() <= 4*maxPooledBody
		}),
	}
}

// Collectors returns the receiver's metrics, for registration.
func (rc *Receiver) Collectors() []prometheus.Collector { return rc.m.collectors() }

// Register adds the receiver's routes to mux.
func (rc *Receiver) Register(mux *http.ServeMux) {
	mux.Handle("POST /audit/{apiserver}", rc)
	mux.Handle("POST /audit", rc)
}

// answer is the outcome of one request.
type answer struct {
	code      int
	apiserver string // established sender, or metrics.UnknownAPIServer
	msg       string
	retry     bool          // add Retry-After
	buf       *bytes.Buffer // the body's buffer, to recycle
	reserved  int64         // bytes of the reading budget held, to release
}

func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := rc.now()
	a := rc.serve(w, r, start)
	if a.retry {
		w.Header().Set("Retry-After", strconv.Itoa(int((rc.opts.RetryAfter+time.Second-1)/time.Second)))
	}
	if a.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="peertrail"`)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(a.code)
	io.WriteString(w, a.msg+"\n")

	rc.m.requests.WithLabelValues(a.apiserver, strconv.Itoa(a.code)).Inc()
	rc.m.ack.Observe(rc.now().Sub(start).Seconds())
	if a.code != http.StatusOK {
		rc.log.Info("audit batch refused", "apiserver", a.apiserver, "code", a.code, "reason", a.msg, "remote", r.RemoteAddr)
	}
}

var apiserverName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request, start time.Time) answer {
	unknown := metrics.UnknownAPIServer
	// Who is asking comes first, from the handshake and the headers alone: nothing of the
	// body is read, and no slot or memory is taken, for a request that may not post.
	id := Identity{}
	if rc.opts.Auth != nil {
		id = rc.opts.Auth.Identify(r)
	}
	switch {
	case id.Role == Reader:
		return answer{code: http.StatusForbidden, apiserver: unknown,
			msg: "a reader's credential may not post audit batches; post with the apiserver's own certificate or token"}
	case id.Role == Invalid:
		return answer{code: http.StatusUnauthorized, apiserver: unknown, msg: "unauthenticated: " + id.Reason}
	case rc.opts.RequireAuth && id.Role != Sender:
		return answer{code: http.StatusUnauthorized, apiserver: unknown,
			msg: "unauthenticated: present the apiserver's client certificate (signed by --client-ca-file) or its bearer token"}
	}
	name := r.PathValue("apiserver")
	if name != "" && !apiserverName.MatchString(name) {
		return answer{code: http.StatusForbidden, apiserver: unknown, msg: fmt.Sprintf("%q is not a valid apiserver name", name)}
	}
	if id.Role == Sender {
		switch {
		case id.APIServer == "":
			return answer{code: http.StatusForbidden, apiserver: unknown,
				msg: fmt.Sprintf("client certificate %q does not map to any apiserver (set its certSubject in the apiservers: config)", id.Subject)}
		case name != "" && id.APIServer != name:
			return answer{code: http.StatusForbidden, apiserver: unknown,
				msg: fmt.Sprintf("path names apiserver %q but the credential is %q's", name, id.APIServer)}
		}
		name = id.APIServer
	}
	if name == "" {
		return answer{code: http.StatusForbidden, apiserver: unknown,
			msg: "cannot tell which apiserver sent this batch: post to /audit/<apiserver> or use a mapped client certificate"}
	}
	if !rc.known[name] && !rc.opts.AcceptUnknown {
		return answer{code: http.StatusForbidden, apiserver: unknown,
			msg: fmt.Sprintf("unknown apiserver %q (configure it, or run with --accept-unknown-apiservers)", name)}
	}
	if !rc.known[name] && !rc.takeUnknown(name) {
		return answer{code: http.StatusForbidden, apiserver: unknown,
			msg: fmt.Sprintf("unknown apiserver %q refused: %d names not in the configuration were taken already, the limit (--max-unknown-apiservers); configure the apiservers by name",
				name, rc.opts.MaxUnknownAPIServers)}
	}

	// The sender's share covers reading and processing: however slowly its bodies come, it
	// holds its own turns only.
	if !rc.takeSenderSlot(name) {
		return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true,
			msg: fmt.Sprintf("overloaded: apiserver %s already has %d requests in flight", name, rc.opts.MaxInflightPerSender)}
	}
	defer rc.releaseSenderSlot(name)
	rc.m.inflight.Inc()
	defer rc.m.inflight.Dec()

	body, a := rc.readBody(w, r, name)
	defer rc.reading.release(a.reserved)
	if body == nil {
		return a
	}
	// Nothing keeps the body once it is decoded (records own copies of their events).
	defer rc.putBody(a.buf)

	// A processing slot only now that the body is here: slots are held for decoding and the
	// spool's fsync, never for a client's network.
	select {
	case rc.slots <- struct{}{}:
		defer func() { <-rc.slots }()
	default:
		return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true,
			msg: fmt.Sprintf("overloaded: %d batches being processed", rc.opts.MaxInflight)}
	}
	var itemsHeld int64 // the reading budget taken for the batch's items, once they are counted
	defer func() { rc.reading.release(itemsHeld) }()
	return rc.accept(r.Context(), body, name, r.RemoteAddr, start, &itemsHeld)
}

// decodedItemBytes is the memory one item takes while its batch is decoded and answered beyond
// its own bytes (its record, its error and dead letter when invalid), as measured for the
// smallest item, {}: it is taken from the reading budget for every item before any is decoded.
const decodedItemBytes = 2 << 10

// errItemsOverBudget is a batch whose items do not fit what is left of the reading budget.
var errItemsOverBudget = errors.New("the items' memory does not fit the reading budget")

// reserveItems returns the Decoder's reservation (record.Decoder.DecodeReserving): it takes
// decodedItemBytes for each item from the reading budget, adding to what *held has.
func (rc *Receiver) reserveItems(held *int64) func(items int) error {
	return func(items int) error {
		need := int64(items) * decodedItemBytes
		if need <= *held {
			return nil
		}
		if !rc.reading.tryTake(need - *held) {
			return errItemsOverBudget
		}
		*held = need
		return nil
	}
}

// takeUnknown reports whether batches from name, which is not configured, are taken: it is
// one of the names taken before, or there is room for one more (MaxUnknownAPIServers). The
// first refusal is logged as a warning (every refusal is logged and counted as a request).
func (rc *Receiver) takeUnknown(name string) bool {
	rc.unknownMu.Lock()
	defer rc.unknownMu.Unlock()
	if rc.unknown[name] {
		return true
	}
	if len(rc.unknown) >= rc.opts.MaxUnknownAPIServers {
		rc.m.unknownRefused.Inc()
		if !rc.unknownFull {
			rc.unknownFull = true
			rc.log.Warn("apiserver names not in the configuration reached their limit: batches under any other new name are refused",
				"limit", rc.opts.MaxUnknownAPIServers, "refused", name)
		}
		return false
	}
	rc.unknown[name] = true
	rc.m.unknownNames.Set(float64(len(rc.unknown)))
	return true
}

func (rc *Receiver) takeSenderSlot(name string) bool {
	rc.senderMu.Lock()
	defer rc.senderMu.Unlock()
	if rc.perSender[name] >= rc.opts.MaxInflightPerSender {
		return false
	}
	rc.perSender[name]++
	return true
}

func (rc *Receiver) releaseSenderSlot(name string) {
	rc.senderMu.Lock()
	defer rc.senderMu.Unlock()
	if rc.perSender[name]--; rc.perSender[name] <= 0 {
		delete(rc.perSender, name)
	}
}

// readBody reads the (possibly gzip-encoded) body within the size and time limits, and within
// the memory budget of bodies being read. On failure it returns nil and the answer to give. The
// answer's reserved bytes, success or not, are the caller's to release once the body is no
// longer used.
func (rc *Receiver) readBody(w http.ResponseWriter, r *http.Request, name string) ([]byte, answer) {
	if rc.opts.ReadTimeout > 0 {
		// Per request, so it also holds on HTTP/2 where connection deadlines do not apply.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(rc.opts.ReadTimeout))
	}
	limit := rc.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, answer{code: http.StatusRequestEntityTooLarge, apiserver: name,
			msg: fmt.Sprintf("body of %d bytes exceeds the limit of %d", r.ContentLength, limit)}
	}
	counted := &countingReader{r: http.MaxBytesReader(w, r.Body, limit)}
	var src io.Reader = counted
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(counted)
		if err != nil {
			rc.m.bytes.WithLabelValues(name).Add(float64(counted.n))
			return nil, rc.readError(name, err, "gzip header")
		}
		defer zr.Close()
		src = zr
	default:
		return nil, answer{code: http.StatusUnsupportedMediaType, apiserver: name,
			msg: fmt.Sprintf("unsupported Content-Encoding %q (want gzip or none)", enc)}
	}
	// Read one byte past the limit so that a decoded body over it is recognised (a gzip bomb).
	// The budget is taken as the bytes arrive (the declared length at once, when it is given):
	// a slow sender holds only what it has sent.
	budgeted := &budgetReader{r: io.LimitReader(src, limit+1), budget: rc.reading}
	buf := bytes.NewBuffer(rc.bodies.Get())
	if r.ContentLength > 0 && src == io.Reader(counted) {
		if !budgeted.reserve(r.ContentLength + 1) {
			return nil, rc.overBudget(name, budgeted.reserved)
		}
		buf.Grow(int(r.ContentLength) + 1)
	}
	_, err := buf.ReadFrom(budgeted)
	body := buf.Bytes()
	rc.m.bytes.WithLabelValues(name).Add(float64(counted.n))
	if err != nil {
		rc.putBody(buf)
		if errors.Is(err, errOverBudget) {
			return nil, rc.overBudget(name, budgeted.reserved)
		}
		a := rc.readError(name, err, "body")
		a.reserved = budgeted.reserved
		return nil, a
	}
	if int64(len(body)) > limit {
		rc.putBody(buf)
		return nil, answer{code: http.StatusRequestEntityTooLarge, apiserver: name, reserved: budgeted.reserved,
			msg: fmt.Sprintf("decoded body exceeds the limit of %d bytes", limit)}
	}
	return body, answer{buf: buf, reserved: budgeted.reserved}
}

func (rc *Receiver) overBudget(name string, reserved int64) answer {
	return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true, reserved: reserved,
		msg: fmt.Sprintf("overloaded: bodies being read hold the memory budget of %d bytes", rc.opts.MaxReadingBytes)}
}

// frameRefused answers a batch whose records could not be made a spool frame: too large for one
// (413, as a body over the limit is), else a fault of ours.
func frameRefused(name string, err error) answer {
	if errors.Is(err, record.ErrFrameTooLarge) {
		return answer{code: http.StatusRequestEntityTooLarge, apiserver: name, msg: err.Error()}
	}
	return answer{code: http.StatusInternalServerError, apiserver: name, msg: err.Error()}
}

// maxPooledBody bounds the buffers kept for reuse, so that one huge body does not stay.
const maxPooledBody = 4 << 20

func (rc *Receiver) putBody(buf *bytes.Buffer) { rc.bodies.Put(buf.Bytes()) }

func (rc *Receiver) readError(name string, err error, what string) answer {
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		return answer{code: http.StatusRequestEntityTooLarge, apiserver: name,
			msg: fmt.Sprintf("body exceeds the limit of %d bytes", tooBig.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return answer{code: http.StatusRequestTimeout, apiserver: name,
			msg: fmt.Sprintf("reading the %s took longer than %s", what, rc.opts.ReadTimeout)}
	case errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) && what == "gzip header":
		return answer{code: http.StatusBadRequest, apiserver: name, msg: fmt.Sprintf("invalid gzip %s: %v", what, err)}
	}
	return answer{code: http.StatusBadRequest, apiserver: name, msg: fmt.Sprintf("reading the %s: %v", what, err)}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// accept decodes body, keeps its invalid items, spools its new events and waits until they are
// durable. The answer is 200 whenever every valid event is stored (now or before).
func (rc *Receiver) accept(ctx context.Context, body []byte, name, remote string, start time.Time, itemsHeld *int64) answer {
	mem, ok := rc.batches.Get()
	if !ok {
		mem = &batchMem{dec: record.NewDecoder()}
		if rc.opts.Redaction != nil {
			mem.dec.Redact(rc.opts.Redaction)
		}
		mem.dec.LimitItems(rc.opts.MaxBatchItems)
	}
	// Nothing keeps the records, their keys or the invalid items past the answer: the frame,
	// the index and the dead letters hold copies.
	defer rc.batches.Put(mem)
	recs, invalid, err := mem.dec.DecodeReserving(body, name, start, rc.reserveItems(itemsHeld))
	switch {
	case errors.Is(err, record.ErrTooManyItems):
		// A limit, as a body over MaxBodyBytes is: the apiserver retries any refusal alike,
		// and none of it is kept (a dead letter per try would let one batch fill them).
		return answer{code: http.StatusRequestEntityTooLarge, apiserver: name,
			msg: fmt.Sprintf("%v: lower the apiserver's --audit-webhook-batch-max-size, or raise peertrail's --max-batch-items", err)}
	case errors.Is(err, errItemsOverBudget):
		return rc.overBudget(name, 0)
	}
	if err != nil {
		// Kept without the objects of redacted resources (Secrets...) in the items it can split.
		rc.keepDead(reasonNotEventList, NewDeadLetter(start, name, remote, err.Error(), -1, mem.dec.RedactRefused(body)))
		return answer{code: http.StatusBadRequest, apiserver: name, msg: err.Error()}
	}
	if len(invalid) > 0 {
		// Kept or not, invalid items must not hold back the valid ones: a refused batch is
		// resent, refused again, and finally dropped by the apiserver, valid events included.
		letters := make([]DeadLetter, len(invalid))
		for i, inv := range invalid {
			letters[i] = NewDeadLetter(start, name, remote, inv.Reason, inv.Index, inv.Raw)
		}
		rc.keepDead(reasonInvalidItem, letters...)
	}

	keys := slices.Grow(mem.keys[:0], len(recs))[:len(recs)]
	stamps := slices.Grow(mem.stamps[:0], len(recs))[:len(recs)]
	mem.keys, mem.stamps = keys, stamps
	for i := range recs {
		keys[i], stamps[i] = recs[i].Key(), recs[i].KeyStamp()
	}
	// Encode outside the lock on the bet that nothing is a duplicate, which is the common case.
	frame, err := rc.codec.AppendFrame(rc.frames.Get(), name, start, recs, keys)
	// The spool copies the frame; once appended it is the next batch's buffer.
	defer func() { rc.frames.Put(frame) }()
	if err != nil {
		return frameRefused(name, err)
	}

	rc.commit.Lock()
	dup, ndup := rc.index.Filter(start, keys, stamps)
	if ndup > 0 && ndup < len(recs) {
		fresh, freshKeys := make([]record.Record, 0, len(recs)-ndup), make([]record.Key, 0, len(recs)-ndup)
		for i := range recs {
			if !dup[i] {
				fresh, freshKeys = append(fresh, recs[i]), append(freshKeys, keys[i])
			}
		}
		frame, err = rc.codec.AppendFrame(frame[:0], name, start, fresh, freshKeys)
		if err != nil {
			rc.index.Forget(keys, dup)
			rc.commit.Unlock()
			return frameRefused(name, err)
		}
	}
	var end spool.Position
	if ndup < len(recs) {
		end, err = rc.spool.Append(frame)
		rc.noteAppend(err, len(frame))
		if err != nil {
			rc.index.Forget(keys, dup)
			rc.commit.Unlock()
			return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true, msg: err.Error()}
		}
	} else {
		// All duplicates: their first copies may still be on their way to disk.
		end = rc.spool.Written()
	}
	rc.commit.Unlock()

	if err := rc.spool.Wait(ctx, end); err != nil {
		return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true, msg: fmt.Sprintf("spool: %v", err)}
	}
	accepted := len(recs) - ndup
	rc.m.events.WithLabelValues(name, metrics.ResultAccepted).Add(float64(accepted))
	rc.m.events.WithLabelValues(name, metrics.ResultDuplicate).Add(float64(ndup))
	rc.m.events.WithLabelValues(name, metrics.ResultInvalid).Add(float64(len(invalid)))
	rc.m.lastBatch.WithLabelValues(name).Set(float64(start.UnixNano()) / 1e9)
	rc.lastMu.Lock()
	rc.last[name] = start
	if _, ok := rc.first[name]; !ok {
		rc.first[name] = start
	}
	rc.lastMu.Unlock()
	return answer{code: http.StatusOK, apiserver: name,
		msg: fmt.Sprintf("accepted %d, duplicate %d, invalid %d", accepted, ndup, len(invalid))}
}

// keepDead writes dead letters; a failure is counted and logged, never turned into a refusal.
func (rc *Receiver) keepDead(reason string, letters ...DeadLetter) {
	if err := rc.dead.Write(letters...); err != nil {
		rc.m.dlDropped.Add(float64(len(letters)))
		rc.log.Error("dead letters could not be kept", "count", len(letters), "err", err)
		return
	}
	rc.m.deadLetters.WithLabelValues(reason).Add(float64(len(letters)))
}

// LastBatches returns when a batch was last accepted from each apiserver.
func (rc *Receiver) LastBatches() map[string]time.Time {
	rc.lastMu.Lock()
	defer rc.lastMu.Unlock()
	out := make(map[string]time.Time, len(rc.last))
	for k, v := range rc.last {
		out[k] = v
	}
	return out
}

// FirstBatches returns when a batch was first accepted from each apiserver, since the receiver
// started: with LastBatches, how long each one's stream has been heard.
func (rc *Receiver) FirstBatches() map[string]time.Time {
	rc.lastMu.Lock()
	defer rc.lastMu.Unlock()
	out := make(map[string]time.Time, len(rc.first))
	for k, v := range rc.first {
		out[k] = v
	}
	return out
}

// refusal is an append the spool refused: its error, the frame's size and when.
type refusal struct {
	err  error
	need int64
	at   time.Time
}

// refusalHoldsFor is how long Ready reports an append that failed for another reason than the
// spool's size limit (a write error, such as a full disk), unless an append succeeds first: the
// receiver cannot tell when the disk has room again without trying.
const refusalHoldsFor = 30 * time.Second

// noteAppend remembers the outcome of a spool append for Ready.
func (rc *Receiver) noteAppend(err error, frame int) {
	rc.refusedMu.Lock()
	defer rc.refusedMu.Unlock()
	if err == nil {
		rc.refused = nil
		return
	}
	rc.refused = &refusal{err: err, need: int64(frame), at: rc.now()}
}

// Ready reports whether the receiver can accept batches: the spool is open and healthy, has
// room, and did not refuse the last append for a reason that still holds (the size limit, until
// consumers free room for that batch; a write error such as a full disk, until an append
// succeeds or refusalHoldsFor passes). Safe for concurrent use.
func (rc *Receiver) Ready() error {
	st := rc.spool.Stats()
	switch {
	case st.Closed:
		return spool.ErrClosed
	case st.Failed != nil:
		return st.Failed
	case st.Bytes >= st.MaxBytes:
		return fmt.Errorf("%w: %d of %d bytes used", spool.ErrFull, st.Bytes, st.MaxBytes)
	}
	rc.refusedMu.Lock()
	ref := rc.refused
	rc.refusedMu.Unlock()
	switch {
	case ref == nil:
		return nil
	case errors.Is(ref.err, spool.ErrFull):
		if st.Bytes+ref.need > st.MaxBytes {
			return fmt.Errorf("%w: %d of %d bytes used, the last batch refused needs %d", spool.ErrFull, st.Bytes, st.MaxBytes, ref.need)
		}
	case rc.now().Sub(ref.at) < refusalHoldsFor:
		return fmt.Errorf("the spool refused the last batch %s ago: %w", rc.now().Sub(ref.at).Round(time.Second), ref.err)
	}
	return nil
}
