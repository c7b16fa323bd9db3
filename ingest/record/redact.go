package record

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// RedactedAnnotation is the annotation a redacted event carries, in its raw JSON and in its
// record: its value names the fields that were dropped ("requestObject,responseObject"), so an
// investigator knows the objects existed. HasRequestObject, HasResponseObject and their sizes
// still describe what was sent.
const RedactedAnnotation = "peertrail.io/redacted"

// DefaultRedacted are the resources whose request and response objects are always dropped:
// they carry credentials. Secrets hold them in data and stringData; a TokenReview's request
// holds the bearer token under review; a TokenRequest's response (serviceaccounts/token) holds
// the token it issued. Each is resource[.group][/subresource], as Redaction reads it.
var DefaultRedacted = []string{"secrets", "tokenreviews.authentication.k8s.io", "serviceaccounts/token"}

// Redaction is the set of resources whose events keep no requestObject or responseObject. The
// objects are removed at decode, before anything (spool, store, dead letters) holds the event.
type Redaction struct {
	rules []redactRule
}

type redactRule struct {
	group, resource string
	// subresource "" matches the resource and every subresource of it.
	subresource string
}

// NewRedaction returns the Redaction of DefaultRedacted and extra. Each entry is
// resource[.group][/subresource], as kubectl spells resources: "secrets" (the core group),
// "tokenreviews.authentication.k8s.io", "serviceaccounts/token", "widgets.example.com". A
// resource alone matches its subresources too; versions are not told apart.
func NewRedaction(extra ...string) (*Redaction, error) {
	var r Redaction
	for _, e := range append(slices.Clone(DefaultRedacted), extra...) {
		rest, sub, _ := strings.Cut(strings.TrimSpace(e), "/")
		res, group, _ := strings.Cut(rest, ".")
		if res == "" || strings.Contains(sub, "/") {
			return nil, fmt.Errorf("redacted resource %q: want resource[.group][/subresource], e.g. secrets or tokenreviews.authentication.k8s.io", e)
		}
		r.rules = append(r.rules, redactRule{group: group, resource: res, subresource: sub})
	}
	return &r, nil
}

// defaultRedaction is what a Decoder redacts unless told more.
var defaultRedaction = func() *Redaction {
	r, err := NewRedaction()
	if err != nil {
		panic(err)
	}
	return r
}()

// Matches reports whether r's objects are to be dropped.
func (x *Redaction) Matches(r *Record) bool {
	if r.Resource == "" {
		return false
	}
	for _, k := range x.rules {
		if k.resource == r.Resource && k.group == r.Group && (k.subresource == "" || k.subresource == r.Subresource) {
			return true
		}
	}
	return false
}

// redact drops r's objects when x says so: r.Raw becomes the event without any member that
// encoding/json would read as requestObject or responseObject (its keys match case-insensitively),
// with RedactedAnnotation added to its annotations, written to mem (nil: allocated). Raw that is
// not a JSON object is left alone; it decoded, so it is one.
func (x *Redaction) redact(r *Record, mem *arena) {
	if !x.Matches(r) {
		return
	}
	var buf []byte
	start := 0
	if mem != nil {
		// Redacting adds at most the annotation, so this is room enough; the arena only moves
		// later appends (see arena), so nothing already handed out changes.
		mem.bytes = slices.Grow(mem.bytes, len(r.Raw)+len(redactedMember)+64)
		buf, start = mem.bytes, len(mem.bytes)
	}
	out, dropped, ok := appendRedacted(buf, r.Raw)
	if !ok || dropped == "" {
		return
	}
	if mem != nil {
		mem.bytes = out
	}
	r.Raw = out[start:len(out):len(out)]
	if r.Annotations == nil {
		r.Annotations = make(map[string]string, 1)
	}
	r.Annotations[RedactedAnnotation] = dropped
}

const redactedMember = `"annotations":{"` + RedactedAnnotation + `":"requestObject,responseObject"}`

// appendRedacted appends raw, a JSON object, to dst without its requestObject and
// responseObject members, and with RedactedAnnotation in its (last) annotations object or in a
// new one. It returns which fields it dropped ("" when none: then dst is not to be used).
func appendRedacted(dst, raw []byte) (out []byte, dropped string, ok bool) {
	var stack [32]member
	members, ok := appendMembers(stack[:0], raw)
	if !ok {
		return dst, "", false
	}
	var req, resp bool
	annotations := -1
	for i, m := range members {
		switch {
		case strings.EqualFold(m.key, "requestObject"):
			req = true
		case strings.EqualFold(m.key, "responseObject"):
			resp = true
		case strings.EqualFold(m.key, "annotations"):
			if v := raw[valueStart(raw, m.colon):m.to]; len(v) > 0 && v[0] == '{' {
				annotations = i
			}
		}
	}
	switch {
	case req && resp:
		dropped = "requestObject,responseObject"
	case req:
		dropped = "requestObject"
	case resp:
		dropped = "responseObject"
	default:
		return dst, "", true
	}
	entry := `"` + RedactedAnnotation + `":"` + dropped + `"`
	out = append(dst, '{')
	first := true
	sep := func() {
		if !first {
			out = append(out, ',')
		}
		first = false
	}
	for i, m := range members {
		if strings.EqualFold(m.key, "requestObject") || strings.EqualFold(m.key, "responseObject") {
			continue
		}
		sep()
		if i != annotations {
			out = append(out, raw[m.from:m.to]...)
			continue
		}
		// Last in the object, so that it wins over a key of the same name already there.
		v := raw[valueStart(raw, m.colon):m.to]
		inner := strings.TrimSpace(string(v[1 : len(v)-1]))
		out = append(out, raw[m.from:m.colon]...)
		out = append(out, ":{"...)
		if inner != "" {
			out = append(out, inner...)
			out = append(out, ',')
		}
		out = append(out, entry...)
		out = append(out, '}')
	}
	if annotations < 0 {
		sep()
		out = append(out, `"annotations":{`...)
		out = append(out, entry...)
		out = append(out, '}')
	}
	return append(out, '}'), dropped, true
}

// member is one key and value of a JSON object: the key unquoted, and where the member starts
// (its key's opening quote), its colon and its value's end.
type member struct {
	key             string
	from, colon, to int
}

// appendMembers appends the members of raw, a JSON object, to dst. Values are read by their
// brackets and quotes alone (skipLoosely), without a depth limit, so it also splits an item too
// deep to decode; it reports false for what is not an object of that shape.
func appendMembers(dst []member, raw []byte) ([]member, bool) {
	s := scanner{b: raw}
	if s.peek() != '{' {
		return dst, false
	}
	s.i++
	ok := s.elements('}', func() bool {
		s.ws()
		from := s.i
		if s.peek() != '"' || !s.skipString() {
			return false
		}
		var key string
		if json.Unmarshal(raw[from:s.i], &key) != nil || s.peek() != ':' {
			return false
		}
		colon := s.i
		s.i++
		s.ws()
		if _, ok := s.skipLoosely(); !ok {
			return false
		}
		dst = append(dst, member{key, from, colon, s.i})
		return true
	})
	return dst, ok && s.end()
}

// redactInvalid returns raw, an item that did not decode into a record (it is kept as a dead
// letter), without the objects the Redaction drops, as far as its objectRef tells its resource.
// An item whose objectRef cannot be read loses its objects whatever they are: what it is cannot
// be told, and it is kept to show what was wrong with it, which its objects rarely are. An item
// that is not a JSON object of members is kept as sent.
func (x *Redaction) redactInvalid(raw []byte) []byte {
	var stack [32]member
	members, ok := appendMembers(stack[:0], raw)
	if !ok {
		return raw
	}
	ref := -1
	for i, m := range members {
		if strings.EqualFold(m.key, "objectRef") {
			ref = i // encoding/json reads the last
		}
	}
	if ref < 0 {
		return raw // no resource, as a record without objectRef, which is not redacted either
	}
	var o struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	}
	m := members[ref]
	if json.Unmarshal(raw[valueStart(raw, m.colon):m.to], &o) == nil &&
		!x.Matches(&Record{Group: o.APIGroup, Resource: o.Resource, Subresource: o.Subresource}) {
		return raw
	}
	if out, dropped, ok := appendRedacted(nil, raw); ok && dropped != "" {
		return out
	}
	return raw
}

// valueStart is where the value after the colon at colon begins.
func valueStart(raw []byte, colon int) int {
	i := colon + 1
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// RedactRefused returns body, which Decode refused as a whole (it is kept as a dead letter),
// with the objects of redacted resources dropped from every item it can still split, as
// redactInvalid drops them from an invalid item. A body whose envelope is not in the usual form
// (scanEnvelope) is returned as it is, and so is one of more items than d takes, which Decode
// refuses with ErrTooManyItems and nothing keeps. The result is d's until its next Decode.
func (d *Decoder) RedactRefused(body []byte) []byte {
	items, _, tooMany, ok := d.scanEnvelope(body)
	if !ok || tooMany || len(items) == 0 {
		return body
	}
	redaction := d.redaction
	if redaction == nil {
		redaction = defaultRedaction
	}
	var out []byte
	last := 0 // the end of what is copied of body
	for i, it := range items {
		red := redaction.redactInvalid(it)
		if len(red) == len(it) && (len(it) == 0 || &red[0] == &it[0]) {
			continue // unchanged: redactInvalid returned the item itself
		}
		from, to := d.bounds[2*i], d.bounds[2*i+1]
		out = append(append(out, body[last:from]...), red...)
		last = to
	}
	if out == nil {
		return body
	}
	return append(out, body[last:]...)
}
