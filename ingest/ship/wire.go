// Package ship carries an agent's spool to the aggregators (the HA layout: a peertrail agent
// beside each kube-apiserver, two or more aggregators each taking every agent's stream). It
// holds the request an agent posts to an aggregator's POST /agent/v1/frames (AppendRequest,
// ParseRequest) and the agent's side: a Shipper per aggregator, a spool consumer that posts the
// frames in spool order and gives up what the spool can no longer hold for an aggregator that
// stays away (Fleet). The aggregator's side, which authenticates the agent, checks and stores
// the frames, is ingest.Receiver's.
//
// A frame travels as the agent spooled it (the receiver's record frame, record.Codec) with its
// spool position, so that the aggregator can tell a frame it has from one it has not by
// position alone, and by event identity after that.
package ship

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/peertrail/peertrail/ingest/spool"
)

// Path is where an aggregator takes agents' frames.
const Path = "/agent/v1/frames"

// ContentType is the media type of a request.
const ContentType = "application/vnd.peertrail.frames.v1"

// A request is:
//
//	magic     8 bytes, "PTSHIP" 0x00 0x01 (the last byte is the version)
//	header    uvarint length + that many bytes of JSON (Header)
//	frames    until the end: uvarint pos, uvarint end, uvarint length + the frame's payload
//
// The frames are in the agent's spool order, each past the one before (pos >= the previous
// end), and each end is its pos plus the spool's frame overhead plus its length: the positions
// are the agent spool's own.
const magic = "PTSHIP\x00\x01"

// Bounds a request must keep: a header of at most MaxHeaderBytes, at most MaxFrames frames, at
// most MaxAggregators aggregators in the header.
const (
	MaxHeaderBytes = 64 << 10
	MaxFrames      = 4096
	MaxAggregators = 64
)

// ErrBadRequest is returned (wrapped) by ParseRequest for a body that is not a request.
var ErrBadRequest = errors.New("not an agent frames request")

// Header is what an agent says about itself in every request, frames or none (a heartbeat).
type Header struct {
	// Stream is the agent spool's spool.Identity: positions compare within one stream only.
	Stream string `json:"stream"`
	// Head is the end of the agent's durable spool when the request was made, HeadTime when the
	// newest batch in it was received (zero: none since the agent started). An aggregator that
	// has stored up to Head has everything the agent had.
	Head     uint64    `json:"head"`
	HeadTime time.Time `json:"head_time"`
	// SentAt is the agent's clock when it made the request.
	SentAt time.Time `json:"sent_at"`
	// SpoolMaxBytes is the agent spool's size limit.
	SpoolMaxBytes int64 `json:"spool_max_bytes"`
	// Aggregators is what the agent holds for, and gave up on, each aggregator it ships to.
	Aggregators []AggregatorState `json:"aggregators,omitempty"`
}

// AggregatorState is an agent's account of one aggregator.
type AggregatorState struct {
	Name string `json:"name"`
	// BacklogBytes is the agent's spool that this aggregator has not acknowledged.
	BacklogBytes int64 `json:"backlog_bytes"`
	// LastSuccess is when the aggregator last acknowledged a request (zero: not since the
	// agent started).
	LastSuccess time.Time `json:"last_success,omitzero"`
	// Skipped counts what the agent gave up for this aggregator, since its data directory was
	// made: the spool was nearly full and this aggregator's backlog held it.
	Skipped Skipped `json:"skipped"`
}

// Skipped is what an agent gave up for one aggregator.
type Skipped struct {
	Frames uint64 `json:"frames,omitempty"`
	Events uint64 `json:"events,omitempty"`
	Bytes  uint64 `json:"bytes,omitempty"`
	// Last is when the agent last gave frames up; From and To are when the frames it gave up
	// then had been received (the hole in the aggregator's data).
	Last time.Time `json:"last,omitzero"`
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
}

// Frame is one spool frame of the agent: its position, the position of the next, and its
// payload (a record frame). A parsed Frame's Payload aliases the request body.
type Frame struct {
	Pos, End uint64
	Payload  []byte
}

// Request is a parsed request.
type Request struct {
	Header Header
	Frames []Frame
}

var (
	streamRE = regexp.MustCompile(`^[0-9a-f]{32}$`)
	// NameRE is what an aggregator's name may be: it becomes part of a spool consumer's name
	// and a label value.
	NameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
)

// AppendRequest appends the request of h and frames to dst. The frames must be in order, each
// End its Pos plus spool.FrameOverhead plus its payload's length, as Entries are.
func AppendRequest(dst []byte, h Header, frames []Frame) ([]byte, error) {
	hdr, err := json.Marshal(h)
	if err != nil {
		return dst, fmt.Errorf("ship: encode header: %w", err)
	}
	if len(hdr) > MaxHeaderBytes {
		return dst, fmt.Errorf("ship: header of %d bytes, more than %d", len(hdr), MaxHeaderBytes)
	}
	if len(frames) > MaxFrames {
		return dst, fmt.Errorf("ship: %d frames, more than %d", len(frames), MaxFrames)
	}
	dst = append(dst, magic...)
	dst = binary.AppendUvarint(dst, uint64(len(hdr)))
	dst = append(dst, hdr...)
	for _, f := range frames {
		dst = binary.AppendUvarint(dst, f.Pos)
		dst = binary.AppendUvarint(dst, f.End)
		dst = binary.AppendUvarint(dst, uint64(len(f.Payload)))
		dst = append(dst, f.Payload...)
	}
	return dst, nil
}

// ParseRequest parses body. It checks the framing and the bounds above, that the stream is a
// spool identity, the aggregators' names, and the frames' positions: in order, none empty,
// each End its Pos plus spool.FrameOverhead plus its length. What the frames hold is for the
// caller to check. The frames' payloads alias body.
func ParseRequest(body []byte) (Request, error) {
	var req Request
	if len(body) < len(magic) || string(body[:len(magic)]) != magic {
		return req, fmt.Errorf("%w: no %q magic", ErrBadRequest, magic[:6])
	}
	p := body[len(magic):]
	n, w := binary.Uvarint(p)
	if w <= 0 || n > MaxHeaderBytes || n > uint64(len(p)-w) {
		return req, fmt.Errorf("%w: header length", ErrBadRequest)
	}
	p = p[w:]
	if err := json.Unmarshal(p[:n], &req.Header); err != nil {
		return req, fmt.Errorf("%w: header: %v", ErrBadRequest, err)
	}
	p = p[n:]
	h := &req.Header
	if !streamRE.MatchString(h.Stream) {
		return req, fmt.Errorf("%w: stream %q is not 32 lowercase hex digits", ErrBadRequest, h.Stream)
	}
	if len(h.Aggregators) > MaxAggregators {
		return req, fmt.Errorf("%w: %d aggregators, more than %d", ErrBadRequest, len(h.Aggregators), MaxAggregators)
	}
	for _, a := range h.Aggregators {
		if !NameRE.MatchString(a.Name) {
			return req, fmt.Errorf("%w: aggregator name %q", ErrBadRequest, a.Name)
		}
	}
	var prevEnd uint64
	for len(p) > 0 {
		if len(req.Frames) == MaxFrames {
			return req, fmt.Errorf("%w: more than %d frames", ErrBadRequest, MaxFrames)
		}
		var f Frame
		var ok bool
		if f.Pos, p, ok = uvarint(p); !ok {
			return req, fmt.Errorf("%w: frame %d: position", ErrBadRequest, len(req.Frames))
		}
		if f.End, p, ok = uvarint(p); !ok {
			return req, fmt.Errorf("%w: frame %d: end", ErrBadRequest, len(req.Frames))
		}
		var size uint64
		if size, p, ok = uvarint(p); !ok || size == 0 || size > spool.MaxFrameBytes || size > uint64(len(p)) {
			return req, fmt.Errorf("%w: frame %d: length", ErrBadRequest, len(req.Frames))
		}
		f.Payload, p = p[:size:size], p[size:]
		switch {
		case f.Pos < prevEnd:
			return req, fmt.Errorf("%w: frame %d at %d is before the end of the one before it (%d)", ErrBadRequest, len(req.Frames), f.Pos, prevEnd)
		case f.Pos > f.End || f.End-f.Pos != spool.FrameOverhead+size:
			return req, fmt.Errorf("%w: frame %d: %d bytes from %d cannot end at %d", ErrBadRequest, len(req.Frames), size, f.Pos, f.End)
		}
		prevEnd = f.End
		req.Frames = append(req.Frames, f)
	}
	return req, nil
}

func uvarint(p []byte) (uint64, []byte, bool) {
	v, w := binary.Uvarint(p)
	if w <= 0 {
		return 0, p, false
	}
	return v, p[w:], true
}
