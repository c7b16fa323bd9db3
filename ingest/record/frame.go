package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/klauspost/compress/zstd"
)

// A frame is one accepted webhook batch as it sits in the spool:
//
//	version    1 byte (frameVersion)
//	apiserver  uvarint length + bytes
//	receivedAt 8 bytes, Unix nanoseconds, big endian
//	keys       uvarint count + 16 bytes each, the records' Keys in order
//	records    zstd-compressed CBOR array of Record
//
// The keys sit uncompressed in front so that rebuilding the duplicate index after a restart
// reads them without decompressing the records.
const frameVersion = 1

// maxFrameRecords bounds what a corrupt count can make a decoder allocate.
const maxFrameRecords = 1 << 20

// ErrBadFrame is returned (wrapped) when a spool frame cannot be decoded.
var ErrBadFrame = errors.New("bad spool frame")

// Batch is the content of one frame: the records one apiserver sent in one webhook request
// that were accepted (valid and not duplicates).
type Batch struct {
	APIServer  string
	ReceivedAt time.Time
	Records    []Record
}

// Codec encodes and decodes frames. It is safe for concurrent use; make one per process and
// share it, since its compressors hold sizeable buffers.
type Codec struct {
	enc  cbor.EncMode
	dec  cbor.DecMode
	zenc *zstd.Encoder
	zdec *zstd.Decoder
}

// NewCodec returns a Codec. Close it to release its compressor goroutines.
func NewCodec() (*Codec, error) {
	enc, err := cbor.EncOptions{Time: cbor.TimeRFC3339Nano}.EncMode()
	if err != nil {
		return nil, fmt.Errorf("cbor encoder: %w", err)
	}
	dec, err := cbor.DecOptions{
		MaxArrayElements: maxFrameRecords,
	}.DecMode()
	if err != nil {
		return nil, fmt.Errorf("cbor decoder: %w", err)
	}
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	// A frame holds at most one webhook body's worth of events; 1 GiB is far beyond any body
	// limit and only stops a corrupt frame from exhausting memory.
	zdec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(1<<30), zstd.WithDecoderConcurrency(0))
	if err != nil {
		zenc.Close()
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &Codec{enc: enc, dec: dec, zenc: zenc, zdec: zdec}, nil
}

// Close releases the codec's resources.
func (c *Codec) Close() {
	c.zenc.Close()
	c.zdec.Close()
}

// AppendFrame appends the frame of (apiserver, receivedAt, records) to dst; keys must be the
// records' Keys in the same order.
func (c *Codec) AppendFrame(dst []byte, apiserver string, receivedAt time.Time, records []Record, keys []Key) ([]byte, error) {
	if len(keys) != len(records) {
		return dst, fmt.Errorf("frame: %d keys for %d records", len(keys), len(records))
	}
	body, err := c.enc.Marshal(records)
	if err != nil {
		return dst, fmt.Errorf("encode records: %w", err)
	}
	dst = append(dst, frameVersion)
	dst = binary.AppendUvarint(dst, uint64(len(apiserver)))
	dst = append(dst, apiserver...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(receivedAt.UnixNano()))
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = append(dst, k[:]...)
	}
	return c.zenc.EncodeAll(body, dst), nil
}

// FrameHeader is the uncompressed front of a frame.
type FrameHeader struct {
	APIServer  string
	ReceivedAt time.Time
	// Keys alias the frame's memory.
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
	h.Keys = make([]Key, n)
	for i := range h.Keys {
		copy(h.Keys[i][:], p[i*16:])
	}
	h.body = p[n*16:]
	return h, nil
}

// DecodeFrame decodes a whole frame. The returned batch does not alias frame.
func (c *Codec) DecodeFrame(frame []byte) (Batch, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return Batch{}, err
	}
	body, err := c.zdec.DecodeAll(h.body, nil)
	if err != nil {
		return Batch{}, fmt.Errorf("%w: decompress: %v", ErrBadFrame, err)
	}
	var recs []Record
	if err := c.dec.Unmarshal(body, &recs); err != nil {
		return Batch{}, fmt.Errorf("%w: decode records: %v", ErrBadFrame, err)
	}
	if len(recs) != len(h.Keys) {
		return Batch{}, fmt.Errorf("%w: %d records for %d keys", ErrBadFrame, len(recs), len(h.Keys))
	}
	return Batch{APIServer: h.APIServer, ReceivedAt: h.ReceivedAt, Records: recs}, nil
}
