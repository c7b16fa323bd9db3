package record

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scanEvent reads one audit event straight into a Record, for the shape apiservers write: every
// key spelled as the audit.k8s.io/v1 types spell it, once, and no nulls. It reports false for
// anything else, and the caller then decodes the item into the audit types, so on every input
// the result is the one encoding/json would give (FuzzDecode checks this): the scanner only
// accepts what it can read exactly, and validates what it skips as strictly as encoding/json.
//
// Why it exists: decoding into auditv1.Event and copying into a Record was half the CPU of an
// acknowledgement, and its allocations started most garbage collections.
//
// mem and maps, when not nil, lend the record memory it keeps only until the batch is done
// (see Decoder); with nil ones it allocates its own.
func scanEvent(raw []byte, r *Record, mem *arena, maps *eventMaps) (kind string, ok bool) {
	s := scanner{b: raw, mem: mem}
	var annotations map[string]string
	var extra map[string][]string
	if maps != nil {
		annotations, extra = maps.annotations, maps.extra
	}
	ok = s.object(func(key []byte) bool {
		switch string(key) {
		case "kind":
			kind, ok = s.str()
		case "apiVersion":
			_, ok = s.str()
		case "level":
			r.Level, ok = s.str()
		case "auditID":
			r.AuditID, ok = s.str()
		case "stage":
			r.Stage, ok = s.str()
		case "requestURI":
			r.RequestURI, ok = s.str()
		case "verb":
			r.Verb, ok = s.str()
		case "userAgent":
			r.UserAgent, ok = s.str()
		case "sourceIPs":
			r.SourceIPs, ok = s.strings()
		case "user":
			ok = s.userInfo(&r.UserName, &r.UserUID, &r.UserGroups, &r.UserExtra, extra)
		case "impersonatedUser":
			ok = s.userInfo(&r.ImpersonatedUser, &r.ImpersonatedUID, &r.ImpersonatedGroups, &r.ImpersonatedExtra, nil)
		case "authenticationMetadata":
			ok = s.object(func(key []byte) bool {
				switch string(key) {
				case "impersonationConstraint":
					r.ImpersonationConstraint, ok = s.str()
					return ok
				}
				return s.unknown(key, "impersonationConstraint")
			})
		case "objectRef":
			ok = s.objectRef(r)
		case "responseStatus":
			ok = s.status(r)
		case "requestObject":
			r.RequestObjectBytes, ok = s.embedded()
			r.HasRequestObject = ok
		case "responseObject":
			r.ResponseObjectBytes, ok = s.embedded()
			r.HasResponseObject = ok
		case "requestReceivedTimestamp":
			r.RequestReceivedTimestamp, ok = s.microTime()
		case "stageTimestamp":
			r.StageTimestamp, ok = s.microTime()
		case "annotations":
			r.Annotations, ok = s.stringMap(annotations)
		default:
			return s.unknown(key, eventKeys...)
		}
		return ok
	})
	return kind, ok && s.end()
}

// eventKeys are the keys of auditv1.Event; a key that matches one of them only when case is
// ignored is a field to encoding/json, so the scanner hands such an event back.
var eventKeys = []string{"kind", "apiVersion", "level", "auditID", "stage", "requestURI", "verb",
	"user", "impersonatedUser", "authenticationMetadata", "sourceIPs", "userAgent", "objectRef",
	"responseStatus", "requestObject", "responseObject", "requestReceivedTimestamp",
	"stageTimestamp", "annotations"}

// scanner is a strict reader of one JSON value. Its methods report false on anything they do
// not accept, and leave the position undefined: the caller gives up on the whole event.
type scanner struct {
	b     []byte
	i     int
	depth int
	mem   *arena // nil: allocate
}

// arena is memory a Decoder lends one worker's events for one batch: unescaped strings and the
// elements of string lists are appended to it and aliased, so a batch allocates nothing for them
// once the arena has grown. Growing moves later appends to a new array and leaves earlier ones
// where they are, so nothing already handed out changes within the batch.
type arena struct {
	bytes []byte
	strs  []string
}

// eventMaps are the maps one item's slot in a Decoder reuses from batch to batch, cleared
// before use: an event's annotations and its user's extra.
type eventMaps struct {
	annotations map[string]string
	extra       map[string][]string
}

// maxScanDepth is far below encoding/json's nesting limit; deeper values go to encoding/json.
const maxScanDepth = 64

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) end() bool { s.ws(); return s.i == len(s.b) }

// object reads an object that maps to a struct, calling field with each key once the reader is
// at its value; field must read the value. A key seen twice fails the object (encoding/json
// merges repeated objects into one another, which the scanner does not mimic), and so does a
// null (encoding/json leaves or clears the field, depending on its type).
func (s *scanner) object(field func(key []byte) bool) bool {
	if s.peek() != '{' || s.depth >= maxScanDepth {
		return false
	}
	s.i++
	s.depth++
	defer func() { s.depth-- }()
	var seenKeys [32][]byte
	seen := seenKeys[:0]
	return s.elements('}', func() bool {
		key, ok := s.key()
		if !ok || s.peek() != ':' {
			return false
		}
		for _, k := range seen {
			if bytes.Equal(k, key) {
				return false
			}
		}
		seen = append(seen, key)
		s.i++
		return s.peek() != 'n' && field(key)
	})
}

// elements reads the rest of a list whose opening bracket has been read: elements separated by
// commas, each read by elem from its start, up to the closing bracket close.
func (s *scanner) elements(close byte, elem func() bool) bool {
	if s.peek() == close {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case close:
			s.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, each element by elem.
func (s *scanner) array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	return s.elements(']', elem)
}

// members reads an object that maps to a Go map: value reads the value of each key (unquoted as
// encoding/json unquotes map keys).
func (s *scanner) members(value func(key string) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	return s.elements('}', func() bool {
		k, ok := s.str()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		return value(k)
	})
}

// key reads an object key that is plain ASCII without escapes, and returns it aliasing the input.
func (s *scanner) key() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	if i := stringStop(s.b, start); i < len(s.b) && s.b[i] == '"' {
		s.i = i + 1
		return s.b[start:i], true
	}
	return nil, false
}

// unknown skips the value of a key the scanner does not read, unless the key is one of known
// spelled in another case (a field to encoding/json).
func (s *scanner) unknown(key []byte, known ...string) bool {
	for _, k := range known {
		if len(k) == len(key) && bytes.EqualFold([]byte(k), key) {
			return false
		}
	}
	return s.skip()
}

// str reads a string. A string without escapes is returned aliasing the input, which the
// record owns and nothing writes to again (decode's slab, or the item's own copy); one with
// escapes is unquoted, by encoding/json itself when it holds \u escapes or invalid UTF-8, so
// that those come out exactly as there.
func (s *scanner) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start := s.i
	plain, ascii := true, true
	for i := start + 1; i < len(s.b); i++ {
		if i = stringStop(s.b, i); i == len(s.b) {
			break
		}
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			seg := s.b[start+1 : i]
			switch {
			case len(seg) == 0:
				return "", true
			case plain && (ascii || utf8.Valid(seg)): // encoding/json replaces invalid UTF-8
				return unsafe.String(&seg[0], len(seg)), true
			}
			if v, ok := s.unescape(seg); ok {
				return v, true
			}
			var v string
			if json.Unmarshal(s.b[start:s.i], &v) != nil {
				return "", false
			}
			return v, true
		case c == '\\':
			plain = false
			i++ // the escaped byte cannot end the string
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// unescape undoes the escapes of a string that is valid UTF-8, as encoding/json's unquote
// does: apiservers escape quotes in messages, and & < > as \u0026 \u003c \u003e (Go's HTML-safe
// JSON), so most list requests' URIs carry one. It reports false for anything else.
func (s *scanner) unescape(seg []byte) (string, bool) {
	if !utf8.Valid(seg) {
		return "", false
	}
	var out []byte
	if s.mem != nil {
		// Unescaping only shortens, so out never outgrows the room made here.
		s.mem.bytes = slices.Grow(s.mem.bytes, len(seg))
		out = s.mem.bytes[len(s.mem.bytes):len(s.mem.bytes)]
	} else {
		out = make([]byte, 0, len(seg))
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i++; i == len(seg) {
			return "", false
		}
		switch seg[i] {
		case '"', '\\', '/':
			out = append(out, seg[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(seg[i+1:])
			if r < 0 {
				return "", false
			}
			i += 4
			// A UTF-16 surrogate pair is one rune; a surrogate alone is U+FFFD.
			if utf16.IsSurrogate(r) {
				if len(seg) > i+2 && seg[i+1] == '\\' && seg[i+2] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(seg[i+3:])); pair != utf8.RuneError {
						out = utf8.AppendRune(out, pair)
						i += 6
						break
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	if len(out) == 0 {
		return "", true
	}
	if s.mem != nil {
		s.mem.bytes = s.mem.bytes[:len(s.mem.bytes)+len(out)]
	}
	return unsafe.String(&out[0], len(out)), true
}

// hex4 reads four hex digits from the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// strings reads an array of strings; [] is an empty, non-nil slice, as encoding/json makes it.
func (s *scanner) strings() ([]string, bool) {
	own := []string{}
	dst := &own
	if s.mem != nil {
		if s.mem.strs == nil {
			s.mem.strs = make([]string, 0, 64)
		}
		dst = &s.mem.strs
	}
	from := len(*dst)
	ok := s.array(func() bool {
		v, ok := s.str()
		*dst = append(*dst, v)
		return ok
	})
	if !ok {
		return nil, false
	}
	// Capped, so that appending to one list cannot write over the next in the arena.
	return (*dst)[from:len(*dst):len(*dst)], true
}

// stringMap reads an object of strings into reuse, cleared, or a new map when reuse is nil; {}
// is an empty, non-nil map, as encoding/json makes it. A repeated key keeps its last value, as
// in encoding/json.
func (s *scanner) stringMap(reuse map[string]string) (map[string]string, bool) {
	out := emptied(reuse)
	ok := s.members(func(k string) bool {
		v, ok := s.str()
		out[k] = v
		return ok
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// emptied returns m cleared, or a new map when m is nil.
func emptied[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	clear(m)
	return m
}

// userInfo reads an authentication/v1 UserInfo. Its extra goes into reuse, cleared, or a new
// map when reuse is nil, and is kept nil when empty, as normalise keeps it.
func (s *scanner) userInfo(name, uid *string, groups *[]string, extra *map[string][]string, reuse map[string][]string) bool {
	return s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "username":
			*name, ok = s.str()
		case "uid":
			*uid, ok = s.str()
		case "groups":
			*groups, ok = s.strings()
		case "extra":
			m := emptied(reuse)
			ok = s.members(func(k string) bool {
				var ok bool
				m[k], ok = s.strings()
				return ok
			})
			*extra = nil
			if len(m) > 0 {
				*extra = m
			}
		default:
			return s.unknown(key, "username", "uid", "groups", "extra")
		}
		return ok
	})
}

func (s *scanner) objectRef(r *Record) bool {
	return s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "resource":
			r.Resource, ok = s.str()
		case "namespace":
			r.Namespace, ok = s.str()
		case "name":
			r.Name, ok = s.str()
		case "apiGroup":
			r.Group, ok = s.str()
		case "apiVersion":
			r.Version, ok = s.str()
		case "subresource":
			r.Subresource, ok = s.str()
		case "uid", "resourceVersion":
			_, ok = s.str()
		default:
			return s.unknown(key, "resource", "namespace", "name", "apiGroup", "apiVersion",
				"subresource", "uid", "resourceVersion")
		}
		return ok
	})
}

// status reads a metav1.Status. A list's remainingItemCount is left to encoding/json: it never
// appears in an audit event's status.
func (s *scanner) status(r *Record) bool {
	return s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "status":
			r.Status, ok = s.str()
		case "message":
			r.Message, ok = s.str()
		case "reason":
			r.Reason, ok = s.str()
		case "code":
			r.Code, ok = s.int32()
		case "kind", "apiVersion":
			_, ok = s.str()
		case "metadata":
			ok = s.object(func(key []byte) bool {
				switch string(key) {
				case "selfLink", "resourceVersion", "continue":
					_, ok := s.str()
					return ok
				}
				return s.unknown(key, "selfLink", "resourceVersion", "continue", "remainingItemCount")
			})
		case "details":
			ok = s.statusDetails()
		default:
			return s.unknown(key, "status", "message", "reason", "code", "kind", "apiVersion",
				"metadata", "details")
		}
		return ok
	})
}

// statusDetails checks a metav1.StatusDetails; the record keeps none of it.
func (s *scanner) statusDetails() bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "name", "group", "kind", "uid":
			_, ok := s.str()
			return ok
		case "retryAfterSeconds":
			_, ok := s.int32()
			return ok
		case "causes":
			return s.array(func() bool {
				return s.object(func(key []byte) bool {
					switch string(key) {
					case "reason", "message", "field":
						_, ok := s.str()
						return ok
					}
					return s.unknown(key, "reason", "message", "field")
				})
			})
		}
		return s.unknown(key, "name", "group", "kind", "uid", "retryAfterSeconds", "causes")
	})
}

// int32 reads an integer that fits in int32; anything else (a fraction, an exponent, a
// string) goes to encoding/json, which rejects or converts it.
func (s *scanner) int32() (int32, bool) {
	s.ws()
	start := s.i
	if !s.number() {
		return 0, false
	}
	lit := s.b[start:s.i]
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if len(lit) > 10 {
		return 0, false
	}
	var n int64
	for _, c := range lit {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	if n < -1<<31 || n > 1<<31-1 {
		return 0, false
	}
	return int32(n), true
}

// embedded skips a runtime.Unknown (requestObject, responseObject) and returns its size: the
// bytes of the value, which is what runtime.Unknown.UnmarshalJSON keeps.
func (s *scanner) embedded() (int64, bool) {
	s.ws()
	start := s.i
	if !s.skip() {
		return 0, false
	}
	return int64(s.i - start), true
}

// microTime reads a timestamp in the form apiservers write (RFC 3339 in UTC with six
// fractional digits) itself, and hands any other value to metav1.MicroTime's own decoder, as
// encoding/json does.
func (s *scanner) microTime() (time.Time, bool) {
	s.ws()
	start := s.i
	if !s.skip() {
		return time.Time{}, false
	}
	if t, ok := parseMicroUTC(s.b[start:s.i]); ok {
		return t, true
	}
	var t metav1.MicroTime
	if t.UnmarshalJSON(s.b[start:s.i]) != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// skip reads past one value of any kind, checking it is valid JSON.
func (s *scanner) skip() bool {
	switch c := s.peek(); {
	case c == '"':
		return s.skipString()
	case c == '{' || c == '[':
		if s.depth >= maxScanDepth {
			return false
		}
		s.i++
		s.depth++
		defer func() { s.depth-- }()
		if c == '[' {
			return s.elements(']', s.skip)
		}
		// Any keys and values, nulls and repeats included (an embedded object's, or a key
		// the scanner does not read).
		return s.elements('}', func() bool {
			if s.peek() != '"' || !s.skipString() || s.peek() != ':' {
				return false
			}
			s.i++
			return s.skip()
		})
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

func (s *scanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

// skipString reads past a string, checking its escapes as encoding/json does (it accepts any
// other byte at or above 0x20, invalid UTF-8 included).
func (s *scanner) skipString() bool {
	for i := s.i + 1; i < len(s.b); i++ {
		if i = stringStop(s.b, i); i == len(s.b) {
			break
		}
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(s.b) {
				return false
			}
			switch s.b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if hex4(s.b[i+2:]) < 0 {
					return false
				}
				i += 5
			default:
				return false
			}
		}
	}
	return false
}

// number reads past a number in JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() bool {
		from := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > from
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	s.i = i
	return true
}

// parseMicroUTC parses "2006-01-02T15:04:05.000000Z", quotes included, and reports false for
// anything else, out-of-range fields included, which time.Parse would reject or read otherwise.
func parseMicroUTC(b []byte) (time.Time, bool) {
	if len(b) != 29 || b[0] != '"' || b[5] != '-' || b[8] != '-' || b[11] != 'T' || b[14] != ':' ||
		b[17] != ':' || b[20] != '.' || b[27] != 'Z' || b[28] != '"' {
		return time.Time{}, false
	}
	num := func(from, to int) (int, bool) {
		n := 0
		for _, c := range b[from:to] {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(1, 5)
	month, ok2 := num(6, 8)
	day, ok3 := num(9, 11)
	hour, ok4 := num(12, 14)
	minute, ok5 := num(15, 17)
	sec, ok6 := num(18, 20)
	micro, ok7 := num(21, 27)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || month < 1 || month > 12 || day < 1 ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, micro*1000, time.UTC)
	if t.Day() != day { // the 31st of a 30-day month, or the 29th of February in most years
		return time.Time{}, false
	}
	return t, true
}

// scanEnvelope reads an EventList whose kind and apiVersion are right and whose keys are
// spelled exactly, once each, and returns its items; it reports false for anything else, which
// the caller then decodes with the JSON library (and so words the error as it does). The items
// share one copy of their part of body, cut so that none can grow into the next.
//
// It only finds where each item ends (skipLoosely), without checking the item is valid JSON:
// the caller must, for every item scanEvent does not accept, check it with json.Valid and
// decode the whole body with the JSON library if one is not, so that an invalid body is refused
// as a whole, as encoding/json refuses it. An array of valid values splits into its items in
// one way only, so on a valid body the loose split is the right one.
//
// It also returns how deeply the deepest item nests (an item's own braces count 1), so that the
// caller can refuse items deeper than maxItemDepth one by one instead of the body as a whole.
//
// Past the Decoder's item limit (maxItems) it keeps reading without keeping bounds, and reports
// tooMany (with ok) instead of items: an EventList of many tiny items costs no memory by the item.
//
// The items and their copy are d's, reused from its previous batch.
func (d *Decoder) scanEnvelope(body []byte) (items []json.RawMessage, deepest int, tooMany, ok bool) {
	s := scanner{b: body}
	var kind, apiVersion string
	bounds, listed, limit, n := d.bounds[:0], false, d.maxItems(), 0
	ok = s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "kind":
			kind, ok = s.str()
		case "apiVersion":
			apiVersion, ok = s.str()
		case "items":
			listed = true
			ok = s.array(func() bool {
				s.ws()
				from := s.i
				depth, ok := s.skipLoosely()
				if !ok {
					return false
				}
				if n++; n > limit {
					return true
				}
				deepest = max(deepest, depth)
				bounds = append(bounds, from, s.i)
				return true
			})
		default:
			return s.unknown(key, "kind", "apiVersion", "items")
		}
		return ok
	})
	d.bounds = bounds
	if !ok || !s.end() || kind != "EventList" || apiVersion != eventListAPIVersion || !listed {
		return nil, 0, false, false
	}
	if n > limit {
		d.bounds = bounds[:0]
		return nil, 0, true, true
	}
	items = d.items[:0]
	if len(bounds) == 0 {
		return items, 0, false, true
	}
	base := bounds[0]
	d.slab = append(d.slab[:0], body[base:bounds[len(bounds)-1]]...)
	for i := 0; i < len(bounds); i += 2 {
		from, to := bounds[i]-base, bounds[i+1]-base
		items = append(items, d.slab[from:to:to])
	}
	d.items = items
	return items, deepest, false, true
}

// skipLoosely reads past one value by its brackets and quotes alone, trusting the caller to
// check the value separately, and returns how deeply it nests (0 for a scalar). It is several
// times faster than skip on long objects, and has no depth limit: it keeps a count, not a stack.
func (s *scanner) skipLoosely() (deepest int, ok bool) {
	b, i := s.b, s.i
	if i >= len(b) {
		return 0, false
	}
	if b[i] != '{' && b[i] != '[' && b[i] != '"' {
		return 0, s.skip() // a scalar: short, read strictly
	}
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			// The string ends at the first quote not escaped; a backslash escapes the byte
			// after it, whatever it is (the value is checked strictly later).
			for i = quoteOrEscape(b, i+1); i < len(b) && b[i] == '\\'; {
				i = quoteOrEscape(b, i+2)
			}
			if i >= len(b) {
				return 0, false
			}
			if depth == 0 {
				s.i = i + 1
				return 0, true
			}
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			if depth--; depth <= 0 {
				s.i = i + 1
				return deepest, depth == 0
			}
		}
	}
	return 0, false
}

// looseDepth returns how deeply the value at the start of b nests, by its brackets and quotes
// alone (skipLoosely's reading), or -1 when they do not close.
func looseDepth(b []byte) int {
	s := scanner{b: b}
	s.ws()
	depth, ok := s.skipLoosely()
	if !ok {
		return -1
	}
	return depth
}
