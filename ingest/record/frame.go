package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/klauspost/compress/s2"

	"github.com/peertrail/peertrail/internal/bufpool"
)

// A frame is one accepted webhook batch as it sits in the spool:
//
//	version    1 byte (frameVersion)
//	apiserver  uvarint length + bytes
//	receivedAt 8 bytes, Unix nanoseconds, big endian
//	keys       uvarint count + 16 bytes each, the records' Keys in order
//	records    S2-compressed: uvarint count, then each Record (binary.go)
//
// S2 (a faster Snappy) rather than zstd: compressing is on the path of every acknowledgement,
// and S2 does it several times faster for a somewhat larger spool.
//
// The keys sit uncompressed in front so that rebuilding the duplicate index after a restart
// reads them without decompressing the records.
const frameVersion = 3

// maxFrameRecords and MaxFrameBody bound what a corrupt frame can make a decoder allocate.
// The records of a frame are allocated only once the header's keys, which the frame's own
// length bounds, have agreed to their count.
//
// MaxFrameBody is the largest uncompressed body a frame may hold; AppendFrame refuses a larger
// one (ErrFrameTooLarge), so every frame written can be read back. A batch's records hold each
// event's raw JSON and the fields taken from it: 1.4-1.7 times the webhook body measured, about
// four at worst (a field's string grows to three times its JSON when invalid UTF-8 becomes
// U+FFFD), within the bound for any body the receiver accepts (config caps it at 64 MiB).
// The decoder allocates the length a frame declares before it can know whether the rest is
// sound, so a bound of 1 GiB let a corrupt frame of twenty bytes cost seconds.
const (
	maxFrameRecords = 1 << 20
	MaxFrameBody    = 256 << 20
)

var (
	// ErrBadFrame is returned (wrapped) when a spool frame cannot be decoded.
	ErrBadFrame = errors.New("bad spool frame")
	// ErrFrameTooLarge is returned (wrapped) by AppendFrame for records whose body would
	// exceed MaxFrameBody.
	ErrFrameTooLarge = errors.New("records too large for one spool frame")
)

// Batch is the content of one frame: the records one apiserver sent in one webhook request
// that were accepted (valid and not duplicates).
type Batch struct {
	APIServer  string
	ReceivedAt time.Time
	Records    []Record
}

// Codec encodes and decodes frames. It is safe for concurrent use; it holds only buffers.
type Codec struct {
	// scratch recycles the uncompressed records of a frame being encoded or decoded: they are
	// garbage the moment they are compressed or read, and a batch's worth is most of a megabyte.
	scratch *bufpool.Pool
}

// maxPooledScratch bounds a kept buffer; pooledScratch is how many are kept: one per batch
// being acknowledged at once plus one per spool consumer decoding.
const (
	maxPooledScratch = 8 << 20
	pooledScratch    = 8
)

// NewCodec returns a Codec.
func NewCodec() (*Codec, error) {
	return &Codec{scratch: bufpool.New(pooledScratch, maxPooledScratch)}, nil
}

// Close releases nothing; it is kept so callers need not know.
func (c *Codec) Close() {}

// AppendFrame appends the frame of (apiserver, receivedAt, records) to dst; keys must be the
// records' Keys in the same order.
func (c *Codec) AppendFrame(dst []byte, apiserver string, receivedAt time.Time, records []Record, keys []Key) ([]byte, error) {
	if len(keys) != len(records) {
		return dst, fmt.Errorf("frame: %d keys for %d records", len(keys), len(records))
	}
	body := binary.AppendUvarint(c.scratch.Get(), uint64(len(records))+1) // as reader.count reads it
	for i := range records {
		body = appendRecord(body, &records[i])
	}
	defer func() { c.scratch.Put(body) }()
	if len(body) > MaxFrameBody {
		return dst, fmt.Errorf("%w: %d records take %d bytes, more than %d", ErrFrameTooLarge, len(records), len(body), MaxFrameBody)
	}
	dst = append(dst, frameVersion)
	dst = binary.AppendUvarint(dst, uint64(len(apiserver)))
	dst = append(dst, apiserver...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(receivedAt.UnixNano()))
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = append(dst, k[:]...)
	}
	n := len(dst)
	dst = slices.Grow(dst, s2.MaxEncodedLen(len(body)))
	return dst[:n+len(s2.Encode(dst[n:cap(dst)], body))], nil
}

// FrameHeader is the uncompressed front of a frame.
type FrameHeader struct {
	APIServer  string
	ReceivedAt time.Time
	// Keys alias the frame's memory: they are valid as long as the frame is.
	Keys []Key
	// body is the compressed records.
	body []byte
}

// ParseHeader reads a frame's header without touching its records.
func ParseHeader(frame []byte) (FrameHeader, error) {
	var h FrameHeader
	if len(frame) == 0 || frame[0] != frameVersion {
		return h, fmt.Errorf("%w: unknown version", ErrBadFrame)
	}
	p := frame[1:]
	n, w := binary.Uvarint(p)
	if w <= 0 || n > uint64(len(p)-w) {
		return h, fmt.Errorf("%w: apiserver length", ErrBadFrame)
	}
	p = p[w:]
	h.APIServer = string(p[:n])
	p = p[n:]
	if len(p) < 8 {
		return h, fmt.Errorf("%w: truncated timestamp", ErrBadFrame)
	}
	h.ReceivedAt = time.Unix(0, int64(binary.BigEndian.Uint64(p))).UTC()
	p = p[8:]
	n, w = binary.Uvarint(p)
	if w <= 0 || n > maxFrameRecords || n*16 > uint64(len(p)-w) {
		return h, fmt.Errorf("%w: key count", ErrBadFrame)
	}
	p = p[w:]
	// A Key is 16 bytes with no alignment of its own: the frame's bytes are the keys. Every
	// consumer reads a frame's keys while it holds the frame, and copying them was 6.4 KB a
	// frame for each of the three.
	h.Keys = unsafe.Slice((*Key)(unsafe.Pointer(unsafe.SliceData(p))), n)
	h.body = p[n*16:]
	return h, nil
}

// BodyLen is the size of the frame's records once decompressed, as the frame declares it
// (DecodeFrame refuses a frame whose records would take more than MaxFrameBody).
func (h FrameHeader) BodyLen() (int, error) {
	n, err := s2.DecodedLen(h.body)
	if err != nil {
		return 0, fmt.Errorf("%w: compressed body: %v", ErrBadFrame, err)
	}
	return n, nil
}

// DecodeFrame decodes a whole frame. The returned batch does not alias frame.
func (c *Codec) DecodeFrame(frame []byte) (Batch, error) {
	return c.decodeFrame(nil, frame, false, nil)
}

// DecodeFrameWithoutRaw decodes a frame but leaves every Record.Raw and Record.Annotations nil,
// for consumers that look at neither (the correlator). The records are decoded into recs'
// memory, grown as needed, so that a consumer that keeps none of them can pass the previous
// batch's Records (nil allocates). Their strings, lists and maps never alias frame; with in
// (nil for none), the ones that recur are shared with other records (see Interner), so none
// may be changed.
func (c *Codec) DecodeFrameWithoutRaw(recs []Record, frame []byte, in *Interner) (Batch, error) {
	return c.decodeFrame(recs, frame, true, in)
}

func (c *Codec) decodeFrame(recs []Record, frame []byte, skipRaw bool, in *Interner) (Batch, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return Batch{}, err
	}
	// A frame holds at most one webhook body's worth of events; the bound only stops a
	// corrupt length from exhausting memory.
	if n, err := s2.DecodedLen(h.body); err != nil || n > MaxFrameBody {
		return Batch{}, fmt.Errorf("%w: compressed body (%d bytes decoded, %v)", ErrBadFrame, n, err)
	}
	// The decompressed records are garbage once decoded (strings are copied out of them).
	buf := c.scratch.Get()
	body, err := s2.Decode(buf[:cap(buf)], h.body)
	defer func() { c.scratch.Put(body) }()
	if err != nil {
		return Batch{}, fmt.Errorf("%w: decompress: %v", ErrBadFrame, err)
	}
	recs, err = readRecords(&reader{b: body, skipRaw: skipRaw, in: in}, recs, len(h.Keys))
	if err != nil {
		return Batch{}, err
	}
	return Batch{APIServer: h.APIServer, ReceivedAt: h.ReceivedAt, Records: recs}, nil
}

// readRecords reads a frame's decompressed records into recs' memory, grown as needed; the
// frame's header counted keys of them. A frame of no records reads as nil, whatever memory was
// passed, so that every decoder gives the same Batch for it.
func readRecords(r *reader, recs []Record, keys int) ([]Record, error) {
	n, _ := r.count()
	if n != keys || n > maxFrameRecords {
		return nil, fmt.Errorf("%w: %d records for %d keys", ErrBadFrame, n, keys)
	}
	recs = slices.Grow(recs[:0], n)[:n]
	for i := range recs {
		recs[i] = Record{}
		readRecord(r, &recs[i])
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("%w: decode records: %v (%d bytes left)", ErrBadFrame, r.err, len(r.b))
	}
	if n == 0 {
		return nil, nil
	}
	return recs, nil
}

// FrameReader decodes frames into memory it keeps from one frame to the next, for a consumer
// that turns each record into something else before it reads the next frame (the events
// writer makes each a row for the engine): once that memory has grown to the frames, decoding
// allocates nothing, where fresh strings, lists, maps and raw JSON for every frame were what
// most of the collector's work was for (BENCHMARKS.md, "A fourteenth session").
//
// The records a Decode returns alias that memory, their strings, lists, maps and Raw included:
// they are valid until the next Decode, which overwrites them; whatever must outlive it must
// be copied. Not safe for concurrent use.
type FrameReader struct {
	body []byte // the frame's records decompressed: every string and Raw points into it
	recs []Record
	strs []string // the string lists, one after another
	// extras and annotations are the maps, taken in order and cleared for each frame.
	extras      []map[string][]string
	annotations []map[string]string
	nExtras     int
	nAnnots     int
}

// maxKeptBody bounds the decompressed frame a FrameReader keeps for the next, and
// maxKeptMapLen a map it clears and reuses (clearing costs a map's capacity, not its length):
// one outsized batch does not stay.
const (
	maxKeptBody   = 8 << 20
	maxKeptMapLen = 64
)

// NewFrameReader returns a FrameReader.
func NewFrameReader() *FrameReader { return &FrameReader{} }

// Decode decodes frame as Codec.DecodeFrame does, into the reader's memory (see FrameReader).
func (fr *FrameReader) Decode(frame []byte) (Batch, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return Batch{}, err
	}
	if n, err := s2.DecodedLen(h.body); err != nil || n > MaxFrameBody {
		return Batch{}, fmt.Errorf("%w: compressed body (%d bytes decoded, %v)", ErrBadFrame, n, err)
	}
	if cap(fr.body) > maxKeptBody {
		fr.body = nil
	}
	body, err := s2.Decode(fr.body[:cap(fr.body)], h.body)
	if err != nil {
		return Batch{}, fmt.Errorf("%w: decompress: %v", ErrBadFrame, err)
	}
	fr.body = body
	fr.strs, fr.nExtras, fr.nAnnots = fr.strs[:0], 0, 0
	recs, err := readRecords(&reader{b: body, fr: fr}, fr.recs, len(h.Keys))
	if err != nil {
		return Batch{}, err
	}
	fr.recs = recs
	return Batch{APIServer: h.APIServer, ReceivedAt: h.ReceivedAt, Records: recs}, nil
}

// nextMap is the next of maps (n of them taken so far for this frame), empty, for a map of
// about hint entries: a Record's extra or annotations.
func nextMap[M ~map[string]V, V any](maps *[]M, n *int, hint int) M {
	if *n == len(*maps) {
		*maps = append(*maps, nil)
	}
	m := (*maps)[*n]
	if m == nil || len(m) > maxKeptMapLen {
		m = make(M, hint)
		(*maps)[*n] = m
	} else {
		clear(m)
	}
	*n++
	return m
}
