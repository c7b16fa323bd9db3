package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// The chain read path: the chains table back into chain.Chain, the inverse of ChainRow, and
// the named queries that answer "the chain of this auditID", "the chains since" and "the
// records of this chain". The chain API (through the lookups server gives it) and the CLI
// (through the API) read chains only here; the chain investigation dashboard asks the same
// named queries' text (queries.Query.Text).

// ChainFromRow rebuilds the chain in row i of res, a query that selects the chains table's
// columns by name (ChainColumns; version and request_time are not needed). It is the inverse of
// ChainRow: what was written reads back equal, with times at the store's microseconds. A value
// that does not parse is an error naming its column.
func ChainFromRow(res *Result, i int) (*chain.Chain, error) {
	d := rowDecoder{res: res, i: i}
	c := &chain.Chain{
		ID: d.str("id"), AuditID: d.str("audit_id"), Revision: int(d.uint("revision")), Evicted: d.bool("evicted"),
		State: chain.State(d.str("state")), Class: chain.Class(d.str("class")), Explanation: d.str("explanation"),
		Verb: d.str("verb"), RequestURI: d.str("request_uri"), Group: d.str("api_group"), Version: d.str("api_version"),
		Resource: d.str("resource"), Subresource: d.str("subresource"), Namespace: d.str("namespace"), Name: d.str("name"),
		User: d.str("user_name"), RealUser: d.str("real_user"), Code: d.int32("code"),
		EntryDurationSeconds: d.float("entry_duration_seconds"), PeerDurationSeconds: d.float("peer_duration_seconds"),
		ForwardingOverheadSeconds: d.float("forwarding_overhead_seconds"),
		FirstReceived:             d.time("first_received"), LastReceived: d.time("last_received"),
		Records: int(d.uint("records")),
	}
	c.Findings = []chain.Finding{}
	for _, f := range d.strs("findings") {
		c.Findings = append(c.Findings, chain.Finding(f))
	}
	c.Entry = d.side("entry")
	c.Peer = d.side("peer")
	if js := d.str("other_sides"); js != "" {
		if err := json.Unmarshal([]byte(js), &c.Others); err != nil && d.err == nil {
			d.err = fmt.Errorf("column other_sides: %w", err)
		}
	} else if names := d.strs("other_apiservers"); len(names) > 0 {
		// Rows written before other_sides existed keep only each further apiserver and its code.
		codes := d.int32s("other_codes")
		for k, n := range names {
			o := &chain.Side{APIServer: n}
			if k < len(codes) {
				o.Code = codes[k]
			}
			c.Others = append(c.Others, o)
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("store: chain row %d: %w", i, d.err)
	}
	return c, nil
}

// rowDecoder reads typed values from one row of a Result; the first failure sticks in err.
type rowDecoder struct {
	res *Result
	i   int
	err error
}

func (d *rowDecoder) fail(col string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("column %s: %w", col, err)
	}
}

func (d *rowDecoder) raw(col string) (string, bool) {
	j := d.res.Index(col)
	if j < 0 {
		d.fail(col, fmt.Errorf("not in the result"))
		return "", false
	}
	return d.res.Rows[d.i][j], true
}

func (d *rowDecoder) str(col string) string {
	v, _ := d.raw(col)
	return v
}

func (d *rowDecoder) bool(col string) bool {
	v, ok := d.raw(col)
	if !ok {
		return false
	}
	switch v {
	case "true", "1":
		return true
	case "false", "0":
		return false
	}
	d.fail(col, fmt.Errorf("bool %q", v))
	return false
}

func (d *rowDecoder) uint(col string) uint64 {
	v, ok := d.raw(col)
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		d.fail(col, err)
	}
	return n
}

func (d *rowDecoder) int32(col string) int32 {
	v, ok := d.raw(col)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		d.fail(col, err)
	}
	return int32(n)
}

func (d *rowDecoder) float(col string) float64 {
	v, ok := d.raw(col)
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		d.fail(col, err)
	}
	return f
}

// time reads a DateTime64; the column default (1970-01-01 00:00:00) is the zero time, as
// ChainRow writes it.
func (d *rowDecoder) time(col string) time.Time {
	v, ok := d.raw(col)
	if !ok {
		return time.Time{}
	}
	t, err := ParseTime(v)
	if err != nil {
		d.fail(col, err)
		return time.Time{}
	}
	if t.UnixMicro() == 0 {
		return time.Time{}
	}
	return t
}

func (d *rowDecoder) literal(col string) any {
	v, ok := d.raw(col)
	if !ok {
		return nil
	}
	x, err := ParseLiteral(v)
	if err != nil {
		d.fail(col, err)
	}
	return x
}

// strs reads an Array(String); an empty array is nil.
func (d *rowDecoder) strs(col string) []string {
	arr, ok := d.literal(col).([]any)
	if !ok {
		if d.err == nil {
			d.fail(col, fmt.Errorf("not an array"))
		}
		return nil
	}
	var out []string
	for _, x := range arr {
		s, ok := x.(string)
		if !ok {
			d.fail(col, fmt.Errorf("element %v is not a string", x))
			return nil
		}
		out = append(out, s)
	}
	return out
}

func (d *rowDecoder) int32s(col string) []int32 {
	arr, ok := d.literal(col).([]any)
	if !ok {
		if d.err == nil {
			d.fail(col, fmt.Errorf("not an array"))
		}
		return nil
	}
	var out []int32
	for _, x := range arr {
		s, _ := x.(string)
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			d.fail(col, err)
			return nil
		}
		out = append(out, int32(n))
	}
	return out
}

// extra reads a Map(String, Array(String)); an empty map is nil.
func (d *rowDecoder) extra(col string) map[string][]string {
	m, ok := d.literal(col).(map[string]any)
	if !ok {
		if d.err == nil {
			d.fail(col, fmt.Errorf("not a map"))
		}
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]string, len(m))
	for k, v := range m {
		arr, ok := v.([]any)
		if !ok {
			d.fail(col, fmt.Errorf("value of %q is not an array", k))
			return nil
		}
		vals := make([]string, 0, len(arr))
		for _, x := range arr {
			s, ok := x.(string)
			if !ok {
				d.fail(col, fmt.Errorf("value of %q holds a non-string", k))
				return nil
			}
			vals = append(vals, s)
		}
		out[k] = vals
	}
	return out
}

// side reads the prefix's side ("entry", "peer"), nil when has_<prefix> is false.
func (d *rowDecoder) side(prefix string) *chain.Side {
	if !d.bool("has_" + prefix) {
		return nil
	}
	p := prefix + "_"
	return &chain.Side{
		APIServer: d.str(p + "apiserver"), Code: d.int32(p + "code"), User: d.str(p + "user"), UID: d.str(p + "uid"),
		Groups: d.strs(p + "groups"), Extra: d.extra(p + "extra"),
		ImpersonatedUser: d.str(p + "impersonated_user"), ImpersonatedGroups: d.strs(p + "impersonated_groups"),
		ImpersonatedExtra: d.extra(p + "impersonated_extra"), SourceIPs: d.strs(p + "source_ips"),
		UserAgent: d.str(p + "user_agent"), Message: d.str(p + "message"), Reason: d.str(p + "reason"),
		RequestReceived: d.time(p + "request_received"), Completed: d.time(p + "completed"),
		Stages: d.strs(p + "stages"), HasObjects: d.bool(p + "has_objects"),
		APIServerVersion: d.str(p + "apiserver_version"),
	}
}

// ParseLiteral parses a value in ClickHouse's text form (Result.Rows) of a composite type: a
// quoted string ('it\'s') becomes a string, an array ([...]) a []any, a map ({k:v,...}) a
// map[string]any, a tuple ((...)) a []any, and a bare token (a number, true, NULL) its text.
func ParseLiteral(s string) (any, error) {
	p := literalParser{s: s}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	if p.i != len(p.s) {
		return nil, fmt.Errorf("text after the value at %d in %q", p.i, s)
	}
	return v, nil
}

type literalParser struct {
	s string
	i int
}

func (p *literalParser) value() (any, error) {
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("value expected at the end of %q", p.s)
	}
	switch p.s[p.i] {
	case '\'':
		return p.quoted()
	case '[':
		return p.list('[', ']')
	case '(':
		return p.list('(', ')')
	case '{':
		p.i++
		m := map[string]any{}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return m, nil
		}
		for {
			k, err := p.value()
			if err != nil {
				return nil, err
			}
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, fmt.Errorf("':' expected at %d in %q", p.i, p.s)
			}
			p.i++
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = v
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return m, nil
			}
			return nil, fmt.Errorf("',' or '}' expected at %d in %q", p.i, p.s)
		}
	}
	start := p.i
	for p.i < len(p.s) && !strings.ContainsRune(",:]})", rune(p.s[p.i])) {
		p.i++
	}
	if p.i == start {
		return nil, fmt.Errorf("value expected at %d in %q", p.i, p.s)
	}
	return p.s[start:p.i], nil
}

func (p *literalParser) list(open, close byte) (any, error) {
	p.i++ // open
	out := []any{}
	if p.i < len(p.s) && p.s[p.i] == close {
		p.i++
		return out, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == close {
			p.i++
			return out, nil
		}
		return nil, fmt.Errorf("',' or %q expected at %d in %q", close, p.i, p.s)
	}
}

// quoted reads a single-quoted string with ClickHouse's backslash escapes.
func (p *literalParser) quoted() (string, error) {
	p.i++ // '
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\'':
			p.i++
			return b.String(), nil
		case c == '\\' && p.i+1 < len(p.s):
			p.i += 2
			switch e := p.s[p.i-1]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'a':
				b.WriteByte('\a')
			case 'v':
				b.WriteByte('\v')
			case 'x':
				if p.i+2 > len(p.s) {
					return "", fmt.Errorf("short \\x escape in %q", p.s)
				}
				n, err := strconv.ParseUint(p.s[p.i:p.i+2], 16, 8)
				if err != nil {
					return "", fmt.Errorf("bad \\x escape in %q", p.s)
				}
				b.WriteByte(byte(n))
				p.i += 2
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", fmt.Errorf("unterminated string in %q", p.s)
}

// ReadChain returns the most recent stored chain with auditID (the named query audit_id_chain),
// or nil when the store holds none. It has the chain.Lookup signature.
func ReadChain(st Store) chain.Lookup {
	return func(ctx context.Context, auditID string) (*chain.Chain, error) {
		chains, err := runChains(ctx, st, "audit_id_chain", map[string]string{"audit_id": auditID})
		if err != nil || len(chains) == 0 {
			return nil, err
		}
		return chains[len(chains)-1], nil // ordered by first_received
	}
}

// ReadChains returns every stored chain with auditID (the named query audit_id_chain), oldest
// first: more than one when clients gave the Audit-ID to several requests. It has the
// chain.ChainsLookup signature.
func ReadChains(st Store) chain.ChainsLookup {
	return func(ctx context.Context, auditID string) ([]*chain.Chain, error) {
		return runChains(ctx, st, "audit_id_chain", map[string]string{"audit_id": auditID})
	}
}

// ListChains returns the stored chains that match f, newest first (the named query
// chains_since). It has the chain.ListLookup signature.
func ListChains(st Store) chain.ListLookup {
	return func(ctx context.Context, f chain.Filter) ([]*chain.Chain, error) {
		params := map[string]string{
			"since":      FormatTime(f.Since),
			"limit":      strconv.Itoa(max(f.Limit, 1)),
			"classes":    "[]",
			"findings":   "[]",
			"apiservers": "[]",
		}
		// An empty array is "any": the embedded engine takes no empty parameter values.
		if f.Class != "" {
			params["classes"] = arrayLiteral([]string{string(f.Class)})
		}
		if f.Finding != "" {
			params["findings"] = arrayLiteral([]string{string(f.Finding)})
		}
		if f.APIServer != "" {
			params["apiservers"] = arrayLiteral([]string{f.APIServer})
		}
		return runChains(ctx, st, "chains_since", params)
	}
}

func runChains(ctx context.Context, st Store, query string, params map[string]string) ([]*chain.Chain, error) {
	q, err := QueryNamed(query)
	if err != nil {
		return nil, err
	}
	res, err := q.Run(ctx, st, params)
	if err != nil {
		return nil, err
	}
	out := make([]*chain.Chain, len(res.Rows))
	for i := range res.Rows {
		if out[i], err = ChainFromRow(res, i); err != nil {
			return nil, fmt.Errorf("store: query %s: %w", query, err)
		}
	}
	return out, nil
}

// ReadRecords returns the stored audit events of chain c (the named query chain_events: the
// events of its auditID, those peertrail received between the chain's first and last record),
// in time order. It has the chain.RecordsLookup signature.
func ReadRecords(st Store) chain.RecordsLookup {
	return func(ctx context.Context, c *chain.Chain) ([]chain.StoredRecord, error) {
		q, err := QueryNamed("chain_events")
		if err != nil {
			return nil, err
		}
		res, err := q.Run(ctx, st, map[string]string{"audit_id": c.AuditID})
		if err != nil {
			return nil, err
		}
		first, last := asStored(c.FirstReceived), asStored(c.LastReceived)
		out := []chain.StoredRecord{}
		for i := range res.Rows {
			d := rowDecoder{res: res, i: i}
			r := chain.StoredRecord{APIServer: d.str("apiserver"), Stage: d.str("stage"), StageTimestamp: d.time("stage_timestamp"),
				ReceivedAt: d.time("received_at"), Event: json.RawMessage(d.str("raw"))}
			if d.err != nil {
				return nil, fmt.Errorf("store: query chain_events: row %d: %w", i, d.err)
			}
			if r.ReceivedAt.Before(first) || r.ReceivedAt.After(last) {
				continue // another request that reused the auditID
			}
			if !json.Valid(r.Event) {
				r.Event = nil
			}
			out = append(out, r)
		}
		return out, nil
	}
}

// CapabilityHistory returns the capability history between since and until (the named query
// apiserver_capabilities). It has the chain.HistoryLookup signature.
func CapabilityHistory(st Store) chain.HistoryLookup {
	return func(ctx context.Context, since, until time.Time) ([]chain.CapabilityRecord, error) {
		q, err := QueryNamed("apiserver_capabilities")
		if err != nil {
			return nil, err
		}
		res, err := q.Run(ctx, st, map[string]string{"since": FormatTime(since), "until": FormatTime(until)})
		if err != nil {
			return nil, err
		}
		out := make([]chain.CapabilityRecord, 0, len(res.Rows))
		for i := range res.Rows {
			d := rowDecoder{res: res, i: i}
			r := chain.CapabilityRecord{
				APIServer: d.str("apiserver"), Version: d.str("version"), Role: d.str("role"),
				Group: d.str("api_group"), APIVersion: d.str("api_version"), Resource: d.str("resource"),
				From: d.time("first_minute"), Until: d.time("until_minute"),
			}
			if v, ok := d.raw("requests"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					d.fail("requests", err)
				}
				r.Requests = n
			}
			if d.err != nil {
				return nil, fmt.Errorf("store: query apiserver_capabilities: row %d: %w", i, d.err)
			}
			out = append(out, r)
		}
		return out, nil
	}
}
