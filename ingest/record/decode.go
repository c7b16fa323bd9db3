package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	gojson "github.com/goccy/go-json"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// ErrNotEventList is returned (wrapped, with the detail) when a body is not an
// audit.k8s.io/v1 EventList at all. Nothing of such a body can be trusted to be an event.
var ErrNotEventList = errors.New("body is not an audit.k8s.io/v1 EventList")

// ErrTooManyItems is returned (wrapped, with the limit) when an EventList holds more items than
// the Decoder takes (LimitItems); then none of them is decoded. It does not wrap
// ErrNotEventList: the body is an EventList, only a larger one than this receiver takes.
var ErrTooManyItems = errors.New("EventList holds more items than the limit")

// DefaultMaxItems is how many items a Decoder takes from one EventList unless LimitItems says
// otherwise: 25 times the apiserver's default batch (--audit-webhook-batch-max-size 400) and
// 10 times the 1000 deploy/ recommends, while memory by the item (the records of tiny items
// outweigh their bytes) stays far below a body's own limit.
const DefaultMaxItems = 10_000

// Invalid is one item of an EventList that could not be turned into a Record.
type Invalid struct {
	// Index is the item's position in the list.
	Index int
	// Raw is the item exactly as sent, except that the objects of a redacted resource are
	// dropped as from a record's (Redaction); when the item did not decode, as far as its
	// objectRef tells (Redaction.redactInvalid).
	Raw []byte
	// Reason says what is wrong with it.
	Reason string
}

// eventListAPIVersion is the only apiVersion of EventList peertrail reads.
var eventListAPIVersion = auditv1.SchemeGroupVersion.String()

// envelope is the EventList with its items left undecoded, so each item's original bytes are
// kept and one bad item does not spoil the others.
type envelope struct {
	Kind       string       `json:"kind"`
	APIVersion string       `json:"apiVersion"`
	Items      boundedItems `json:"items"`
}

// boundedItems is the items of an envelope the JSON library decodes, split as
// []json.RawMessage would be, but counted before any is kept: a list longer than the limit is
// kept as tooMany alone, so the library's path costs no more memory by the item than the
// scanner's. The last value of the key wins, as the library has it. The items are a copy in
// d's slab, as the scanner's are.
type boundedItems struct {
	d       *Decoder
	items   []json.RawMessage
	tooMany bool
}

func (b *boundedItems) UnmarshalJSON(data []byte) error {
	b.tooMany = false
	if string(data) == "null" {
		b.items = nil // as into a slice
		return nil
	}
	// The library found where the value ends; checked here too, whichever library it is.
	if len(data) == 0 || data[0] != '[' || !json.Valid(data) {
		return fmt.Errorf("items: want an array, got %.20q", data)
	}
	s := scanner{b: data, i: 1}
	bounds, limit, n := b.d.bounds[:0], b.d.maxItems(), 0
	ok := s.elements(']', func() bool {
		s.ws()
		from := s.i
		if _, ok := s.skipLoosely(); !ok {
			return false
		}
		if n++; n <= limit {
			bounds = append(bounds, from, s.i)
		}
		return true
	})
	b.d.bounds = bounds[:0]
	switch {
	case !ok:
		return fmt.Errorf("items: %.20q does not split into values", data)
	case n > limit:
		b.items, b.tooMany = nil, true
		return nil
	}
	b.d.slab = append(b.d.slab[:0], data...)
	items := b.d.items[:0]
	for i := 0; i < len(bounds); i += 2 {
		items = append(items, b.d.slab[bounds[i]:bounds[i+1]:bounds[i+1]])
	}
	b.d.items, b.items = items, items
	return nil
}

// Decode parses an EventList body sent by apiserver and received at receivedAt. It returns the
// valid events as records and the invalid items with their reasons. The error is non-nil, and
// wraps ErrNotEventList, only when the body as a whole is not an EventList; then both slices are
// nil. The returned records own their memory; body may be reused after Decode returns.
func Decode(body []byte, apiserver string, receivedAt time.Time) ([]Record, []Invalid, error) {
	return NewDecoder().Decode(body, apiserver, receivedAt)
}

// unmarshaler is the JSON decoder in use: github.com/goccy/go-json in production, about three
// times faster than encoding/json on audit events; encoding/json in the tests that prove the two
// give identical records. In production most events never reach it: scanEvent reads the usual
// shape directly (scan true), and hands the rest over.
type unmarshaler func([]byte, any) error

// A Decoder decodes EventLists as Decode does, but into memory it keeps from one batch to the
// next: the copy of the items that records alias, the records, their string lists, unescaped
// strings and maps. A batch then allocates almost nothing, which on the acknowledge path means
// fewer garbage collections and fewer pages touched for the first time (BENCHMARKS.md).
//
// What Decode returns, records, invalid items and everything they hold, belongs to the Decoder
// and is valid only until its next Decode: the caller must copy what it keeps. A Decoder is not
// safe for concurrent use; it spreads one batch across the cores itself.
type Decoder struct {
	unmarshal unmarshaler
	scan      bool
	redaction *Redaction // nil: DefaultRedacted
	limit     int        // items one EventList may hold; 0: DefaultMaxItems

	bounds  []int // where each item starts and ends in the body
	items   []json.RawMessage
	slab    []byte // the items' copy
	decoded []Record
	errs    []error
	maps    []eventMaps // one per item
	mem     []arena     // one per worker
}

// NewDecoder returns a Decoder for production use (the scanner, then goccy/go-json).
func NewDecoder() *Decoder { return &Decoder{unmarshal: gojson.Unmarshal, scan: true} }

// Redact sets the resources whose objects d drops (NewRedaction: DefaultRedacted and more);
// without it d drops those of DefaultRedacted. Call it before the first Decode.
func (d *Decoder) Redact(x *Redaction) { d.redaction = x }

// LimitItems sets how many items an EventList may hold (n <= 0: DefaultMaxItems); Decode
// refuses a longer one with ErrTooManyItems before decoding any of them. Call it before the
// first Decode.
func (d *Decoder) LimitItems(n int) { d.limit = n }

func (d *Decoder) maxItems() int {
	if d.limit <= 0 {
		return DefaultMaxItems
	}
	return d.limit
}

// Decode is the package's Decode, except that what it returns is valid only until the next call.
func (d *Decoder) Decode(body []byte, apiserver string, receivedAt time.Time) ([]Record, []Invalid, error) {
	return d.decode(d.scan, body, apiserver, receivedAt, nil)
}

// DecodeReserving is Decode, except that once the EventList is split into its items, and
// before any of them is decoded, it calls reserve with their number; an error from reserve is
// returned as it is, with nothing decoded. reserve may be called again with the same number
// (a body decoded a second time by the JSON library), so it must take only what it does not
// hold yet. It lets a caller bound the memory of items, whose records outweigh tiny items'
// bytes, as it bounds bodies.
func (d *Decoder) DecodeReserving(body []byte, apiserver string, receivedAt time.Time, reserve func(items int) error) ([]Record, []Invalid, error) {
	return d.decode(d.scan, body, apiserver, receivedAt, reserve)
}

// Footprint is roughly how many bytes d keeps between batches, for a caller that bounds what it
// keeps: one huge batch should not stay resident for good.
func (d *Decoder) Footprint() int {
	n := cap(d.slab) + cap(d.decoded)*int(unsafe.Sizeof(Record{})) +
		cap(d.items)*int(unsafe.Sizeof(json.RawMessage{})) + cap(d.bounds)*int(unsafe.Sizeof(0))
	for _, m := range d.mem {
		n += cap(m.bytes) + cap(m.strs)*int(unsafe.Sizeof(""))
	}
	return n
}

// maxReusedMap bounds the maps a Decoder clears and reuses; a bigger one, from an odd event, is
// dropped rather than cleared batch after batch.
const maxReusedMap = 64

// maxItemDepth is how deeply an item may nest (the event's own braces count 1); a deeper item
// is invalid, and only that item. A real event nests a few levels plus its objects' own depth,
// tens at most; JSON libraries refuse a value 10000 deep (encoding/json and goccy/go-json, the
// whole body with it), and ClickHouse's JSON functions, which an investigator runs over the raw
// column, stop at 1024. So 1000 passes anything an apiserver writes, and every item kept stays
// readable by all of them.
const maxItemDepth = 1000

// errTooDeep marks an item deeper than maxItemDepth: it is refused without being read, so it is
// not checked for being valid JSON either.
var errTooDeep = errors.New("too deep")

func (d *Decoder) decode(scan bool, body []byte, apiserver string, receivedAt time.Time, reserve func(int) error) ([]Record, []Invalid, error) {
	var items []json.RawMessage
	scanned, deepest, tooMany := false, 0, false
	if scan {
		items, deepest, tooMany, scanned = d.scanEnvelope(body)
	}
	// Split deep bodies here, not with the JSON library, which refuses a body as a whole for one
	// item nested past its limit. The scanner reads the usual envelope only; a deep body in any
	// other form is refused. (The envelope adds two levels to its items'.)
	deepBody := scanned && deepest > maxItemDepth
	if !scanned && looseDepth(body) > maxItemDepth+2 {
		var ok bool
		if items, _, tooMany, ok = d.scanEnvelope(body); !ok {
			return nil, nil, fmt.Errorf("%w: nested deeper than %d and not an EventList the items can be split from",
				ErrNotEventList, maxItemDepth+2)
		}
		scanned, deepBody = true, true
	}
	if tooMany && !json.Valid(body) {
		// The scanner splits loosely: an invalid body is refused in the JSON library's words.
		scanned, tooMany = false, false
	}
	if tooMany {
		return nil, nil, fmt.Errorf("%w of %d", ErrTooManyItems, d.maxItems())
	}
	if !scanned {
		env := envelope{Items: boundedItems{d: d}}
		if err := d.unmarshal(body, &env); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrNotEventList, err)
		}
		if env.Items.tooMany {
			return nil, nil, fmt.Errorf("%w of %d", ErrTooManyItems, d.maxItems())
		}
		if env.Kind != "EventList" || env.APIVersion != eventListAPIVersion {
			return nil, nil, fmt.Errorf("%w: kind %q apiVersion %q, want kind \"EventList\" apiVersion %q",
				ErrNotEventList, env.Kind, env.APIVersion, eventListAPIVersion)
		}
		items = env.Items.items
	}
	n := len(items)
	if reserve != nil {
		if err := reserve(n); err != nil {
			return nil, nil, err
		}
	}
	if d.decoded == nil {
		d.decoded = make([]Record, 0, n) // non-nil even when empty, as encoding/json's would be
	}
	d.decoded = slices.Grow(d.decoded[:0], n)[:n]
	d.errs = slices.Grow(d.errs[:0], n)[:n]
	d.maps = slices.Grow(d.maps[:0], n)[:n]

	// Items decode independently, so a large batch is split across the cores: the apiserver
	// waits for the answer, and this is most of the time spent before it.
	redaction := d.redaction
	if redaction == nil {
		redaction = defaultRedaction
	}
	parts := max(min(runtime.GOMAXPROCS(0), n/parallelDecodeMin), 1)
	d.mem = slices.Grow(d.mem[:0], parts)[:parts]
	var wg sync.WaitGroup
	// Assigned once, so that the workers' closures copy them instead of moving them to the heap.
	checkDepth, redact := deepBody, redaction
	for p := range parts {
		lo, hi := p*n/parts, (p+1)*n/parts
		mem := &d.mem[p]
		mem.bytes, mem.strs = mem.bytes[:0], mem.strs[:0]
		work := func() {
			for i := lo; i < hi; i++ {
				if checkDepth {
					if depth := looseDepth(items[i]); depth > maxItemDepth {
						d.decoded[i] = Record{}
						d.errs[i] = fmt.Errorf("%w: item nested %d deep, more than the limit of %d", errTooDeep, depth, maxItemDepth)
						continue
					}
				}
				maps := &d.maps[i]
				d.decoded[i], d.errs[i] = decodeEvent(d.unmarshal, scan, items[i], apiserver, receivedAt, mem, maps)
				// Before anything keeps the event, an invalid one (kept as a dead letter) too.
				redact.redact(&d.decoded[i], mem)
				if len(maps.annotations) > maxReusedMap {
					maps.annotations = nil
				}
				if len(maps.extra) > maxReusedMap {
					maps.extra = nil
				}
			}
		}
		if parts == 1 {
			work()
		} else {
			wg.Go(work)
		}
	}
	wg.Wait()
	if scanned {
		// The items were split loosely (scanEnvelope); one that is not valid JSON makes the
		// whole body invalid, as encoding/json would have it. A too deep one is refused
		// unread, whatever it holds.
		for i, err := range d.errs {
			if err != nil && !errors.Is(err, errTooDeep) && !json.Valid(items[i]) {
				if deepBody {
					return nil, nil, fmt.Errorf("%w: item %d is not valid JSON", ErrNotEventList, i)
				}
				return d.decode(false, body, apiserver, receivedAt, reserve)
			}
		}
	}
	records := d.decoded[:0]
	var invalid []Invalid
	for i, err := range d.errs {
		if err != nil {
			raw := d.decoded[i].Raw // redacted, when it decoded far enough to tell its resource
			if raw == nil {
				raw = redaction.redactInvalid(items[i])
			}
			invalid = append(invalid, Invalid{Index: i, Raw: raw, Reason: err.Error()})
			continue
		}
		records = append(records, d.decoded[i])
	}
	return records, invalid, nil
}

// parallelDecodeMin is the number of items below which splitting a batch costs more than it saves.
const parallelDecodeMin = 32

// decodeEvent decodes one item. mem and maps are lent to the scanner (nil: it allocates).
func decodeEvent(unmarshal unmarshaler, scan bool, raw json.RawMessage, apiserver string, receivedAt time.Time, mem *arena, maps *eventMaps) (Record, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return Record{}, errors.New("item is not a JSON object")
	}
	// Each item is the decoder's own copy (the slab of scanEnvelope or boundedItems), so the
	// record may keep raw, and its strings may alias it.
	if scan {
		var r Record
		kind, ok := scanEvent(raw, &r, mem, maps)
		if maps != nil && maps.annotations == nil {
			maps.annotations = r.Annotations // the slot's map from the next batch on
		}
		if maps != nil && maps.extra == nil {
			maps.extra = r.UserExtra
		}
		if ok {
			r.APIServer, r.ReceivedAt, r.Raw = apiserver, receivedAt.UTC(), raw
			return r, check(&r, kind)
		}
	}
	var ev auditv1.Event
	if err := unmarshal(raw, &ev); err != nil {
		return Record{}, fmt.Errorf("decode event: %v", err)
	}
	r := normalise(&ev, raw, apiserver, receivedAt)
	return r, check(&r, ev.Kind)
}

// check says what makes a decoded event unusable: without these fields it cannot be keyed or
// joined, and a time outside what the store holds would be stored as another time.
func check(r *Record, kind string) error {
	switch {
	case r.AuditID == "":
		return errors.New("event has no auditID")
	case r.Stage == "":
		return errors.New("event has no stage")
	case r.StageTimestamp.IsZero():
		return errors.New("event has no stageTimestamp")
	case kind != "" && kind != "Event":
		return fmt.Errorf("item kind %q, want \"Event\"", kind)
	case !Storable(r.StageTimestamp):
		return outOfRange("stageTimestamp", r.StageTimestamp)
	case !r.RequestReceivedTimestamp.IsZero() && !Storable(r.RequestReceivedTimestamp):
		// Zero is absent (Go's metav1.MicroTime writes a zero time as null), kept as the
		// column's default; any other time must be one the store holds.
		return outOfRange("requestReceivedTimestamp", r.RequestReceivedTimestamp)
	}
	return nil
}

// MinTime and MaxTime bound the times a Record may carry, so that the store keeps them as they
// are. The store's time columns are DateTime64(6, 'UTC') (store.EventColumns:
// request_received_timestamp, stage_timestamp), whose range is 1900-01-01 to 2299-12-31, and
// ClickHouse does not refuse a time outside it but wraps it (9999-01-01 is stored as
// 1816-03-30). The writers narrow the top further: they send ticks computed from
// time.Time.UnixNano, an int64 of nanoseconds that ends at 2262-04-11T23:47:16.854775807Z, and a
// later time wraps to 1677 or thereabouts. So MaxTime is that end, in whole microseconds (the
// precision of the column and of what apiservers write). An event with a time outside is
// refused here, as invalid, rather than stored as a time it does not say. record cannot import
// store (store imports record); test/attack stores both bounds and reads them back unchanged.
var (
	MinTime = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Unix(0, math.MaxInt64).UTC().Truncate(time.Microsecond)
)

// Storable reports whether t is within [MinTime, MaxTime], so the store keeps it as it is.
func Storable(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }

func outOfRange(field string, t time.Time) error {
	return fmt.Errorf("%s %s is outside the range the store holds (%s to %s)", field,
		t.Format(time.RFC3339Nano), MinTime.Format(time.DateOnly), MaxTime.Format(time.DateOnly))
}

// normalise flattens ev into a Record. raw must already belong to the record.
func normalise(ev *auditv1.Event, raw []byte, apiserver string, receivedAt time.Time) Record {
	r := Record{
		APIServer:                apiserver,
		AuditID:                  string(ev.AuditID),
		Stage:                    string(ev.Stage),
		Level:                    string(ev.Level),
		Verb:                     ev.Verb,
		RequestURI:               ev.RequestURI,
		UserName:                 ev.User.Username,
		UserUID:                  ev.User.UID,
		UserGroups:               ev.User.Groups,
		UserExtra:                extra(ev.User.Extra),
		SourceIPs:                ev.SourceIPs,
		UserAgent:                ev.UserAgent,
		RequestReceivedTimestamp: ev.RequestReceivedTimestamp.UTC(),
		StageTimestamp:           ev.StageTimestamp.UTC(),
		Annotations:              ev.Annotations,
		ReceivedAt:               receivedAt.UTC(),
		Raw:                      raw,
	}
	if o := ev.ObjectRef; o != nil {
		r.Group = o.APIGroup
		r.Version = o.APIVersion
		r.Resource = o.Resource
		r.Subresource = o.Subresource
		r.Namespace = o.Namespace
		r.Name = o.Name
	}
	if u := ev.ImpersonatedUser; u != nil {
		r.ImpersonatedUser = u.Username
		r.ImpersonatedUID = u.UID
		r.ImpersonatedGroups = u.Groups
		r.ImpersonatedExtra = extra(u.Extra)
	}
	if m := ev.AuthenticationMetadata; m != nil {
		r.ImpersonationConstraint = m.ImpersonationConstraint
	}
	if s := ev.ResponseStatus; s != nil {
		r.Code = s.Code
		r.Status = s.Status
		r.Reason = string(s.Reason)
		r.Message = s.Message
	}
	if o := ev.RequestObject; o != nil {
		r.HasRequestObject = true
		r.RequestObjectBytes = int64(len(o.Raw))
	}
	if o := ev.ResponseObject; o != nil {
		r.HasResponseObject = true
		r.ResponseObjectBytes = int64(len(o.Raw))
	}
	return r
}

func extra[V ~[]string](m map[string]V) map[string][]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]string, len(m))
	for k, v := range m {
		out[k] = []string(v)
	}
	return out
}
