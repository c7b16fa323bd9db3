// Package chainapi is the chains' read face: it serves them over HTTP, from memory first (the
// correlator's open chains and the final ones it keeps for the late window) and then from the
// store (its lookups, which run the store's named queries), as one chain whichever way it was
// read. It knows the correlator and the store only by the interfaces and lookups it is given.
package chainapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// Memory is the correlator's face to readers (*correlate.Correlator): the chains it holds, open
// and recently final, each built afresh for the caller. Requests call it concurrently.
type Memory interface {
	// Chains returns every chain with auditID in memory, oldest first.
	Chains(auditID string) []*chain.Chain
	// List returns the chains in memory that match f, newest first.
	List(f chain.Filter) []*chain.Chain
}

// Servers is the correlator's capability view (*correlate.Capabilities): what each apiserver
// was seen to serve, and the version it ran when. Requests call it concurrently.
type Servers interface {
	Snapshot() []chain.APIServerView
	LastSeen(apiserver string) (version string, at time.Time)
	VersionAt(apiserver string, t time.Time) string
}

// Stores are the API's ways into the store for what memory no longer holds (or never held:
// the raw events); any may be nil.
type Stores struct {
	// Chains gives every stored chain of an auditID; Chain, asked only when Chains is nil,
	// the most recent one alone.
	Chains  chain.ChainsLookup
	Chain   chain.Lookup
	List    chain.ListLookup
	Records chain.RecordsLookup
	History chain.HistoryLookup
}

// API serves the chains over HTTP:
//
//	GET /api/v1/chains/{auditID}[?chain=ID]  the most recent chain with that auditID (or the
//	    one with that chain ID), 404 when there is none; the same fields whether it comes
//	    from memory or from the store. A client may give one Audit-ID to several requests, so
//	    the answer also counts and lists every other chain of the auditID, from memory and
//	    the store (ChainAnswer): chains_with_audit_id (1 when the auditID is one request's),
//	    other_chains (the others in full, oldest first), and a warning when the store could
//	    not be asked (then only memory's are listed). Every chain of an auditID with more
//	    than one carries the finding audit_id_reused.
//	GET /api/v1/chains/{auditID}/records[?chain=ID]  that chain's audit events as the
//	    apiservers sent them (from the store: memory keeps no raw events), only those of its
//	    own sides (apiserver and request time) when the auditID has other chains
//	GET /api/v1/chains?class=&finding=&apiserver=&since=&limit=  newest first: the chains in
//	    memory (open, and final ones for the late window), and with since= the stored ones too
//	GET /api/v1/apiservers        what each apiserver was seen to serve and whether it proxied
//	GET /api/v1/apiservers?at=TIME  the capability history (the store's) of the version epoch
//	    of each apiserver that holds TIME: which group/version/resources it served or
//	    forwarded, from when to when
//	GET /api/v1/apiservers?since=&until=  the capability history over a time range
type API struct {
	mem     Memory
	servers Servers
	// older, olderAll and olderList are consulted for chains no longer in memory; may be nil.
	olderAll  chain.ChainsLookup
	older     chain.Lookup
	olderList chain.ListLookup
	records   chain.RecordsLookup
	history   chain.HistoryLookup
}

// New returns the API over the correlator's memory and capability view, with the store's
// lookups st. Memory and servers may be nil only where the routes that read them are not asked.
func New(mem Memory, servers Servers, st Stores) *API {
	return &API{mem: mem, servers: servers, olderAll: st.Chains, older: st.Chain, olderList: st.List, records: st.Records, history: st.History}
}

// Normalize puts a chain in the form the API serves, whichever way it was read: times at the
// store's precision (microseconds, UTC) and findings never null. A chain from memory and the
// same chain from the store are then equal field by field.
func Normalize(c *chain.Chain) *chain.Chain {
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
	for _, s := range append([]*chain.Side{c.Entry, c.Peer}, c.Others...) {
		if s != nil {
			s.RequestReceived, s.Completed = us(s.RequestReceived), us(s.Completed)
		}
	}
	if c.Findings == nil {
		c.Findings = []chain.Finding{}
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

// chains returns every chain with auditID, from memory and the store (memory's version of a
// chain in both), oldest first, each with audit_id_reused when there is more than one; the
// string warns that the store could not be asked, and the error (with its HTTP status) says
// that nothing was found and the store could not be asked.
func (a *API) chains(ctx context.Context, id string) ([]*chain.Chain, string, int, error) {
	var out []*chain.Chain
	if a.mem != nil {
		out = a.mem.Chains(id)
	}
	var stored []*chain.Chain
	var err error
	switch {
	case a.olderAll != nil:
		stored, err = a.olderAll(ctx, id)
	case a.older != nil:
		var c *chain.Chain
		if c, err = a.older(ctx, id); c != nil {
			stored = []*chain.Chain{c}
		}
	}
	warning := ""
	if err != nil {
		if len(out) == 0 {
			return nil, "", http.StatusServiceUnavailable, fmt.Errorf("no chain with auditID %q in memory, and the store could not be asked: %v", id, err)
		}
		warning = "only the chains in memory: the store could not be asked: " + err.Error()
	}
	seen := make(map[string]bool, len(out))
	for _, c := range out {
		seen[c.ID] = true
	}
	for _, c := range stored {
		if !seen[c.ID] {
			seen[c.ID] = true
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, "", http.StatusNotFound, fmt.Errorf("no chain with auditID %q", id)
	}
	for _, c := range out {
		Normalize(c)
		if len(out) > 1 && !c.HasFinding(chain.FindingAuditIDReused) {
			c.Findings = append(c.Findings, chain.FindingAuditIDReused)
		}
	}
	chain.SortChains(out)
	return out, warning, http.StatusOK, nil
}

// find returns the chain with auditID that chainID names (the most recent when it is ""),
// with the others of its auditID; the int is the HTTP status of a failure.
func (a *API) find(ctx context.Context, id, chainID string) (*chain.ChainAnswer, int, error) {
	all, warning, code, err := a.chains(ctx, id)
	if err != nil {
		return nil, code, err
	}
	i := len(all) - 1
	if chainID != "" {
		if i = slices.IndexFunc(all, func(c *chain.Chain) bool { return c.ID == chainID }); i < 0 {
			return nil, http.StatusNotFound, fmt.Errorf("no chain %q with auditID %q (it has %d)", chainID, id, len(all))
		}
	}
	ans := &chain.ChainAnswer{Chain: all[i], ChainsWithAuditID: len(all), Warning: warning}
	ans.OtherChains = append(slices.Clone(all[:i]), all[i+1:]...)
	return ans, http.StatusOK, nil
}

func (a *API) chain(w http.ResponseWriter, r *http.Request) {
	ans, code, err := a.find(r.Context(), r.PathValue("auditID"), r.URL.Query().Get("chain"))
	if err != nil {
		writeJSON(w, code, apiError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

func (a *API) chainRecords(w http.ResponseWriter, r *http.Request) {
	if a.records == nil {
		writeJSON(w, http.StatusNotFound, apiError{"no store: the raw audit events are kept only in the store (serve runs with --store none)"})
		return
	}
	ans, code, err := a.find(r.Context(), r.PathValue("auditID"), r.URL.Query().Get("chain"))
	if err != nil {
		writeJSON(w, code, apiError{err.Error()})
		return
	}
	c := ans.Chain
	recs, err := a.records(r.Context(), c)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, apiError{fmt.Sprintf("the store could not be asked for the records of chain %s: %v", c.ID, err)})
		return
	}
	if ans.ChainsWithAuditID > 1 {
		recs = ownRecords(c, recs)
	}
	if recs == nil {
		recs = []chain.StoredRecord{}
	}
	writeJSON(w, http.StatusOK, struct {
		Chain             *chain.Chain         `json:"chain"`
		ChainsWithAuditID int                  `json:"chains_with_audit_id"`
		Records           []chain.StoredRecord `json:"records"`
	}{c, ans.ChainsWithAuditID, recs})
}

// ownRecords keeps the records of c's own sides, by apiserver and request time: other
// requests with its auditID may have been received in the same stretch of time.
func ownRecords(c *chain.Chain, recs []chain.StoredRecord) []chain.StoredRecord {
	type key struct {
		apiserver string
		at        time.Time
	}
	own := map[key]bool{}
	for _, s := range append([]*chain.Side{c.Entry, c.Peer}, c.Others...) {
		if s != nil {
			own[key{s.APIServer, s.RequestReceived.UTC().Truncate(time.Microsecond)}] = true
		}
	}
	out := recs[:0:0]
	for _, rec := range recs {
		var ev struct {
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
		}
		_ = json.Unmarshal(rec.Event, &ev)
		if own[key{rec.APIServer, ev.RequestReceivedTimestamp.UTC().Truncate(time.Microsecond)}] {
			out = append(out, rec)
		}
	}
	return out
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := chain.Filter{Class: chain.Class(q.Get("class")), Finding: chain.Finding(q.Get("finding")), APIServer: q.Get("apiserver"), Limit: 100}
	if f.Class != "" && !slices.Contains(chain.Classes, f.Class) {
		writeJSON(w, http.StatusBadRequest, apiError{fmt.Sprintf("unknown class %q (want one of %v)", f.Class, chain.Classes)})
		return
	}
	if f.Finding != "" && !slices.Contains(chain.Findings, f.Finding) {
		writeJSON(w, http.StatusBadRequest, apiError{fmt.Sprintf("unknown finding %q (want one of %v)", f.Finding, chain.Findings)})
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
	chains := a.mem.List(f)
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
		chains = []*chain.Chain{}
	}
	writeJSON(w, http.StatusOK, struct {
		Chains  []*chain.Chain `json:"chains"`
		Warning string         `json:"warning,omitempty"`
	}{chains, warning})
}

// mergeChains adds the stored chains that memory does not hold (memory's are newer versions),
// newest first, at most limit.
func mergeChains(memory, stored []*chain.Chain, limit int) []*chain.Chain {
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
	slices.SortStableFunc(out, func(a, b *chain.Chain) int { return b.LastReceived.Compare(a.LastReceived) })
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
	views := a.servers.Snapshot()
	if views == nil {
		views = []chain.APIServerView{}
	}
	writeJSON(w, http.StatusOK, struct {
		APIServers []chain.APIServerView `json:"apiservers"`
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
		if a.servers != nil {
			records = exactEpochs(EpochsAt(records, at, a.servers.LastSeen), at, a.servers.VersionAt)
		} else {
			records = EpochsAt(records, at, nil)
		}
	}
	if records == nil {
		records = []chain.CapabilityRecord{}
	}
	out := struct {
		At      *time.Time               `json:"at,omitempty"`
		Since   time.Time                `json:"since"`
		Until   time.Time                `json:"until"`
		History []chain.CapabilityRecord `json:"history"`
	}{Since: since, Until: until, History: records}
	if !at.IsZero() {
		out.At = &at
	}
	writeJSON(w, http.StatusOK, out)
}
