package correlate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Lookup finds a final chain that is no longer in memory (the store's chains table). It
// returns (nil, nil) when there is none.
type Lookup func(ctx context.Context, auditID string) (*Chain, error)

// ListLookup lists the stored chains that match f (whose Since is set), newest first, at most
// f.Limit of them.
type ListLookup func(ctx context.Context, f Filter) ([]*Chain, error)

// RecordsLookup returns the stored audit events of chain c (the store's events table), oldest
// first.
type RecordsLookup func(ctx context.Context, c *Chain) ([]StoredRecord, error)

// StoredRecord is one audit event of a chain as the store keeps it: the event's JSON exactly as
// the apiserver sent it (objects of redacted resources dropped at ingest).
type StoredRecord struct {
	APIServer      string          `json:"apiserver"`
	Stage          string          `json:"stage"`
	StageTimestamp time.Time       `json:"stage_timestamp"`
	ReceivedAt     time.Time       `json:"received_at"`
	Event          json.RawMessage `json:"event"`
}

// Stores are the API's ways into the store for what memory no longer holds (or never held:
// the raw events); any may be nil.
type Stores struct {
	Chain   Lookup
	List    ListLookup
	Records RecordsLookup
	History HistoryLookup
}

// API serves the chains over HTTP:
//
//	GET /api/v1/chains/{auditID}  the most recent chain with that auditID (404 when unknown);
//	    the same fields whether it comes from memory or from the store
//	GET /api/v1/chains/{auditID}/records  that chain's audit events as the apiservers sent
//	    them (from the store: memory keeps no raw events)
//	GET /api/v1/chains?class=&finding=&apiserver=&since=&limit=  newest first: the chains in
//	    memory (open, and final ones for the late window), and with since= the stored ones too
//	GET /api/v1/apiservers        what each apiserver was seen to serve and whether it proxied
//	GET /api/v1/apiservers?at=TIME  the capability history (the store's) of the version epoch
//	    of each apiserver that holds TIME: which group/version/resources it served or
//	    forwarded, from when to when
//	GET /api/v1/apiservers?since=&until=  the capability history over a time range
type API struct {
	co *Correlator
	// older and olderList are consulted for chains no longer in memory; may be nil.
	older     Lookup
	olderList ListLookup
	records   RecordsLookup
	history   HistoryLookup
}

// NewAPI returns the API over co, falling back to older and olderList (the store) for chains
// it no longer holds.
func NewAPI(co *Correlator, older Lookup, olderList ListLookup) *API {
	return &API{co: co, older: older, olderList: olderList}
}

// NewStoredAPI returns the API over co with the store's lookups st.
func NewStoredAPI(co *Correlator, st Stores) *API {
	return &API{co: co, older: st.Chain, olderList: st.List, records: st.Records, history: st.History}
}

// Normalize puts a chain in the form the API serves, whichever way it was read: times at the
// store's precision (microseconds, UTC) and findings never null. A chain from memory and the
// same chain from the store are then equal field by field.
func Normalize(c *Chain) *Chain {
	if c == nil {
		return nil
	}
	us := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return t.UTC().Truncate(time.Microsecond)
	}
	c.FirstReceived, c.LastReceived = us(c.FirstReceived), us(c.LastReceived)
	for _, s := range append([]*Side{c.Entry, c.Peer}, c.Others...) {
		if s != nil {
			s.RequestReceived, s.Completed = us(s.RequestReceived), us(s.Completed)
		}
	}
	if c.Findings == nil {
		c.Findings = []Finding{}
	}
	return c
}

// Register adds the API's routes to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/chains/{auditID}", a.chain)
	mux.HandleFunc("GET /api/v1/chains/{auditID}/records", a.chainRecords)
	mux.HandleFunc("GET /api/v1/chains", a.list)
	mux.HandleFunc("GET /api/v1/apiservers", a.apiservers)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

type apiError struct {
	Error string `json:"error"`
}

// find returns the most recent chain with auditID, from memory or else the store; the int is
// the HTTP status of a failure.
func (a *API) find(ctx context.Context, id string) (*Chain, int, error) {
	if c, ok := a.co.Chain(id); ok {
		return Normalize(c), http.StatusOK, nil
	}
	if a.older != nil {
		c, err := a.older(ctx, id)
		if err != nil {
			return nil, http.StatusServiceUnavailable, fmt.Errorf("chain %s is not in memory and the store could not be asked: %v", id, err)
		}
		if c != nil {
			return Normalize(c), http.StatusOK, nil
		}
	}
	return nil, http.StatusNotFound, fmt.Errorf("no chain with auditID %q", id)
}

func (a *API) chain(w http.ResponseWriter, r *http.Request) {
	c, code, err := a.find(r.Context(), r.PathValue("auditID"))
	if err != nil {
		writeJSON(w, code, apiError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *API) chainRecords(w http.ResponseWriter, r *http.Request) {
	if a.records == nil {
		writeJSON(w, http.StatusNotFound, apiError{"no store: the raw audit events are kept only in the store (serve runs with --store none)"})
		return
	}
	c, code, err := a.find(r.Context(), r.PathValue("auditID"))
	if err != nil {
		writeJSON(w, code, apiError{err.Error()})
		return
	}
	recs, err := a.records(r.Context(), c)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, apiError{fmt.Sprintf("the store could not be asked for the records of chain %s: %v", c.ID, err)})
		return
	}
	if recs == nil {
		recs = []StoredRecord{}
	}
	writeJSON(w, http.StatusOK, struct {
		Chain   *Chain         `json:"chain"`
		Records []StoredRecord `json:"records"`
	}{c, recs})
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := Filter{Class: Class(q.Get("class")), Finding: Finding(q.Get("finding")), APIServer: q.Get("apiserver"), Limit: 100}
	if f.Class != "" && !slices.Contains(Classes, f.Class) {
		writeJSON(w, http.StatusBadRequest, apiError{fmt.Sprintf("unknown class %q (want one of %v)", f.Class, Classes)})
		return
	}
	if f.Finding != "" && !slices.Contains(Findings, f.Finding) {
		writeJSON(w, http.StatusBadRequest, apiError{fmt.Sprintf("unknown finding %q (want one of %v)", f.Finding, Findings)})
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 10000 {
			writeJSON(w, http.StatusBadRequest, apiError{"limit must be 1..10000"})
			return
		}
		f.Limit = n
	}
	if v := q.Get("since"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			f.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, v); err == nil {
			f.Since = t
		} else {
			writeJSON(w, http.StatusBadRequest, apiError{"since must be a duration (15m) or an RFC 3339 time"})
			return
		}
	}
	chains := a.co.List(f)
	for _, c := range chains {
		Normalize(c)
	}
	var warning string
	// Final chains leave memory after the late window; a since= reaching further (the runbooks
	// ask for 15 or 30 minutes) must not silently return only the last few minutes.
	if a.olderList != nil && !f.Since.IsZero() && len(chains) < f.Limit {
		stored, err := a.olderList(r.Context(), f)
		if err != nil {
			warning = "only the chains in memory (the last few minutes): the store could not be asked: " + err.Error()
		} else {
			chains = mergeChains(chains, stored, f.Limit)
		}
	}
	if chains == nil {
		chains = []*Chain{}
	}
	writeJSON(w, http.StatusOK, struct {
		Chains  []*Chain `json:"chains"`
		Warning string   `json:"warning,omitempty"`
	}{chains, warning})
}

// mergeChains adds the stored chains that memory does not hold (memory's are newer versions),
// newest first, at most limit.
func mergeChains(memory, stored []*Chain, limit int) []*Chain {
	seen := make(map[string]bool, len(memory))
	for _, c := range memory {
		seen[c.ID] = true
	}
	out := memory
	for _, c := range stored {
		if !seen[c.ID] {
			out = append(out, Normalize(c))
		}
	}
	slices.SortStableFunc(out, func(a, b *Chain) int { return b.LastReceived.Compare(a.LastReceived) })
	return out[:min(len(out), limit)]
}

// parseTime reads an API time: RFC 3339, or a duration before now (15m).
func parseTime(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(-d), nil
	}
	return time.Parse(time.RFC3339Nano, v)
}

func (a *API) apiservers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("at") || q.Has("since") {
		a.capabilityHistory(w, r)
		return
	}
	views := a.co.caps.Snapshot()
	if views == nil {
		views = []APIServerView{}
	}
	writeJSON(w, http.StatusOK, struct {
		APIServers []APIServerView `json:"apiservers"`
	}{views})
}

func (a *API) capabilityHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if a.history == nil {
		writeJSON(w, http.StatusNotFound, apiError{"no store: the capability history is kept only in the store (serve runs with --store none)"})
		return
	}
	now := time.Now().UTC()
	var at, since, until time.Time
	var err error
	if v := q.Get("at"); v != "" {
		if at, err = parseTime(v, now); err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{"at must be an RFC 3339 time or a duration ago (15m)"})
			return
		}
		since, until = at.Add(-AtWindow), at.Add(AtWindow)
	} else {
		if since, err = parseTime(q.Get("since"), now); err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{"since must be an RFC 3339 time or a duration ago (24h)"})
			return
		}
		until = now
		if v := q.Get("until"); v != "" {
			if until, err = parseTime(v, now); err != nil {
				writeJSON(w, http.StatusBadRequest, apiError{"until must be an RFC 3339 time or a duration ago"})
				return
			}
		}
	}
	records, err := a.history(r.Context(), since, until)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, apiError{"the store could not be asked for the capability history: " + err.Error()})
		return
	}
	if !at.IsZero() {
		if a.co != nil {
			records = exactEpochs(EpochsAt(records, at, a.co.caps.LastSeen), at, a.co.caps.VersionAt)
		} else {
			records = EpochsAt(records, at, nil)
		}
	}
	if records == nil {
		records = []CapabilityRecord{}
	}
	out := struct {
		At      *time.Time         `json:"at,omitempty"`
		Since   time.Time          `json:"since"`
		Until   time.Time          `json:"until"`
		History []CapabilityRecord `json:"history"`
	}{Since: since, Until: until, History: records}
	if !at.IsZero() {
		out.At = &at
	}
	writeJSON(w, http.StatusOK, out)
}
