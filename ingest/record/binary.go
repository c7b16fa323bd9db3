package record

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
	"unsafe"
)

// The records of a frame are written field by field in the order of Record's declaration:
// strings and byte slices as a uvarint length and the bytes, string lists and maps as a uvarint
// count and their elements, integers as zigzag varints, booleans as one byte, and times as a
// presence byte, Unix seconds and nanoseconds. A reflective encoder (CBOR, JSON) spent more time here
// than the rest of the acknowledgement; this one is a straight walk both ways. Adding a field
// means a new frameVersion.

var errShort = errors.New("truncated record")

type writer struct{ b []byte }

func (w *writer) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *writer) bytes(p []byte) {
	w.b = binary.AppendUvarint(w.b, uint64(len(p)))
	w.b = append(w.b, p...)
}

func (w *writer) strs(ss []string) {
	if ss == nil {
		w.b = append(w.b, 0)
		return
	}
	w.b = binary.AppendUvarint(w.b, uint64(len(ss))+1) // 0 is nil, 1 is empty
	for _, s := range ss {
		w.str(s)
	}
}

func (w *writer) extra(m map[string][]string) {
	if m == nil {
		w.b = append(w.b, 0)
		return
	}
	w.b = binary.AppendUvarint(w.b, uint64(len(m))+1)
	for k, v := range m {
		w.str(k)
		w.strs(v)
	}
}

func (w *writer) annotations(m map[string]string) {
	if m == nil {
		w.b = append(w.b, 0)
		return
	}
	w.b = binary.AppendUvarint(w.b, uint64(len(m))+1)
	for k, v := range m {
		w.str(k)
		w.str(v)
	}
}

func (w *writer) int(n int64) { w.b = binary.AppendVarint(w.b, n) }

func (w *writer) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *writer) time(t time.Time) {
	if t.IsZero() {
		w.b = append(w.b, 0)
		return
	}
	// Seconds and nanoseconds apart: exact for any time a timestamp can name, where Unix
	// nanoseconds overflow outside 1678..2262.
	w.b = append(w.b, 1)
	w.int(t.Unix())
	w.int(int64(t.Nanosecond()))
}

func appendRecord(b []byte, r *Record) []byte {
	w := writer{b}
	w.str(r.APIServer)
	w.str(r.AuditID)
	w.str(r.Stage)
	w.str(r.Level)
	w.str(r.Verb)
	w.str(r.RequestURI)
	w.str(r.Group)
	w.str(r.Version)
	w.str(r.Resource)
	w.str(r.Subresource)
	w.str(r.Namespace)
	w.str(r.Name)
	w.str(r.UserName)
	w.str(r.UserUID)
	w.strs(r.UserGroups)
	w.extra(r.UserExtra)
	w.str(r.ImpersonatedUser)
	w.str(r.ImpersonatedUID)
	w.strs(r.ImpersonatedGroups)
	w.extra(r.ImpersonatedExtra)
	w.str(r.ImpersonationConstraint)
	w.strs(r.SourceIPs)
	w.str(r.UserAgent)
	w.int(int64(r.Code))
	w.str(r.Status)
	w.str(r.Reason)
	w.str(r.Message)
	w.time(r.RequestReceivedTimestamp)
	w.time(r.StageTimestamp)
	w.annotations(r.Annotations)
	w.bool(r.HasRequestObject)
	w.int(r.RequestObjectBytes)
	w.bool(r.HasResponseObject)
	w.int(r.ResponseObjectBytes)
	w.time(r.ReceivedAt)
	w.bytes(r.Raw)
	return w.b
}

// reader decodes; after the first error every read returns zero values and err stays set.
type reader struct {
	b   []byte
	err error
	// skipRaw leaves Record.Raw and Record.Annotations nil: consumers that never look at them
	// (the correlator) do not pay for copying them.
	skipRaw bool
	// fr, when set, is the memory strings, lists and maps are read into and alias (see
	// FrameReader), rather than copies of their own.
	fr *FrameReader
	// in, when set, shares the values that recur from record to record (see Interner).
	in *Interner
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	// Most are one byte: a string's length under 128, a count, a flag.
	if len(r.b) > 0 && r.b[0] < 0x80 {
		v := r.b[0]
		r.b = r.b[1:]
		return uint64(v)
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) str() string {
	p := r.take(r.uvarint())
	if r.fr != nil {
		return unsafe.String(unsafe.SliceData(p), len(p))
	}
	return string(p)
}

func (r *reader) bytes() []byte {
	p := r.take(r.uvarint())
	if len(p) == 0 || r.skipRaw {
		return nil
	}
	if r.fr != nil {
		return p
	}
	return append([]byte(nil), p...)
}

// count reads a list or map length (stored plus one, zero meaning nil) and checks it against
// what is left, so a corrupt count cannot make the decoder allocate without bound.
func (r *reader) count() (n int, isNil bool) {
	c := r.uvarint()
	if r.err != nil || c == 0 {
		return 0, true
	}
	if c-1 > uint64(len(r.b)) {
		r.err = errShort
		return 0, true
	}
	return int(c - 1), false
}

func (r *reader) strs() []string {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	if r.fr != nil {
		if n == 0 {
			return []string{}
		}
		from := len(r.fr.strs)
		for range n {
			r.fr.strs = append(r.fr.strs, r.str())
		}
		return r.fr.strs[from:len(r.fr.strs):len(r.fr.strs)]
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = r.str()
	}
	return ss
}

func (r *reader) extra() map[string][]string {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	var m map[string][]string
	if r.fr != nil {
		m = nextMap(&r.fr.extras, &r.fr.nExtras, n)
	} else {
		m = make(map[string][]string, n)
	}
	for range n {
		k := r.str()
		m[k] = r.strs()
	}
	return m
}

func (r *reader) annotations() map[string]string {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	if r.skipRaw {
		for range 2 * n {
			r.take(r.uvarint())
		}
		return nil
	}
	var m map[string]string
	if r.fr != nil {
		m = nextMap(&r.fr.annotations, &r.fr.nAnnots, n)
	} else {
		m = make(map[string]string, n)
	}
	for range n {
		k := r.str()
		m[k] = r.str()
	}
	return m
}

func (r *reader) bool() bool {
	p := r.take(1)
	return len(p) == 1 && p[0] != 0
}

func (r *reader) time() time.Time {
	if !r.bool() {
		return time.Time{}
	}
	sec := r.int()
	nsec := r.int()
	if nsec < 0 || nsec >= 1e9 {
		r.err = errors.New("nanoseconds out of range")
		return time.Time{}
	}
	return time.Unix(sec, nsec).UTC()
}

func (r *reader) int32() int32 {
	v := r.int()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.err = errors.New("code out of range")
	}
	return int32(v)
}

func readRecord(r *reader, rec *Record) {
	rec.APIServer = r.sym()
	rec.AuditID = r.str()
	rec.Stage = r.sym()
	rec.Level = r.sym()
	rec.Verb = r.sym()
	rec.RequestURI = r.str()
	rec.Group = r.sym()
	rec.Version = r.sym()
	rec.Resource = r.sym()
	rec.Subresource = r.sym()
	rec.Namespace = r.sym()
	rec.Name = r.str()
	rec.UserName = r.sym()
	rec.UserUID = r.sym()
	rec.UserGroups = r.sharedStrs()
	rec.UserExtra = r.sharedExtra()
	rec.ImpersonatedUser = r.sym()
	rec.ImpersonatedUID = r.sym()
	rec.ImpersonatedGroups = r.sharedStrs()
	rec.ImpersonatedExtra = r.sharedExtra()
	rec.ImpersonationConstraint = r.sym()
	rec.SourceIPs = r.sharedStrs()
	rec.UserAgent = r.sym()
	rec.Code = r.int32()
	rec.Status = r.sym()
	rec.Reason = r.sym()
	rec.Message = r.str()
	rec.RequestReceivedTimestamp = r.time()
	rec.StageTimestamp = r.time()
	rec.Annotations = r.annotations()
	rec.HasRequestObject = r.bool()
	rec.RequestObjectBytes = r.int()
	rec.HasResponseObject = r.bool()
	rec.ResponseObjectBytes = r.int()
	rec.ReceivedAt = r.time()
	rec.Raw = r.bytes()
}
