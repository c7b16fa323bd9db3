package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/chainapi"
	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/storetest"
)

// A chain reads the same from the store as from memory: a chain of every class, read through
// the chain API while the correlator holds it, and again once it has aged out of memory and the
// API reads it from the store, compared field by field (both sides' records included); its raw
// records come from the store either way.
func TestChainReadsTheSameFromStoreAsFromMemory(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	codec := newCodec(t)
	begin := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	sc, err := storetest.Build(storetest.Options{Begin: begin, Duration: 2 * time.Minute, Seed: 16, Background: 300})
	if err != nil {
		t.Fatal(err)
	}
	// The posts as the receiver decodes them, and a loop: a proxied request's peer records
	// again from a third apiserver, one hop further.
	type post struct {
		apiserver string
		at        time.Time
		recs      []record.Record
	}
	var posts []post
	var last time.Time
	for _, p := range sc.Posts {
		recs, invalid, err := record.Decode(p.Body, p.APIServer, p.ReceivedAt)
		if err != nil || len(invalid) > 0 {
			t.Fatalf("decode a post of %s: %v %v", p.APIServer, err, invalid)
		}
		posts = append(posts, post{p.APIServer, p.ReceivedAt, recs})
		last = maxT(last, p.ReceivedAt)
	}
	loopID := sc.Expect[string(chain.ClassProxied)][0]
	var loop []record.Record
	for _, p := range posts {
		for _, r := range p.recs {
			if r.AuditID == loopID && r.APIServer == "kas-c" {
				r.APIServer = "kas-b"
				r.SourceIPs = append(slices.Clone(r.SourceIPs), "10.0.0.13")
				r.ReceivedAt = r.ReceivedAt.Add(time.Millisecond)
				loop = append(loop, r)
			}
		}
	}
	if len(loop) == 0 {
		t.Fatalf("no kas-c record of %s", loopID)
	}
	posts = append(posts, post{"kas-b", loop[len(loop)-1].ReceivedAt, loop})

	w := store.NewWriter(s, codec, store.WriterOptions{})
	co := correlate.New(correlate.Config{Join: correlate.DefaultJoinOptions(), Codec: codec,
		Caps: correlate.NewCapabilities(24 * time.Hour), Sink: w})
	var pos spool.Position
	feed := func(p post) {
		t.Helper()
		keys := make([]record.Key, len(p.recs))
		for i := range p.recs {
			keys[i] = p.recs[i].Key()
		}
		frame, err := codec.AppendFrame(nil, p.apiserver, p.at, p.recs, keys)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteEvents(ctx, p.recs); err != nil {
			t.Fatal(err)
		}
		e := spool.Entry{Pos: pos, End: pos + spool.Position(len(frame)), Payload: frame}
		pos = e.End
		if _, err := co.Consume(ctx, []spool.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(posts, func(a, b post) int { return a.at.Compare(b.at) })
	for _, p := range posts {
		feed(p)
	}
	// A record of a bystander moves the stream's time on: past the chain window every chain
	// is final (and in the store), within the late window they are still in memory.
	tick := func(at time.Time) {
		r := posts[0].recs[0]
		r.APIServer, r.AuditID, r.ReceivedAt = "tick", fmt.Sprintf("tick-%d", at.UnixNano()), at
		r.RequestReceivedTimestamp, r.StageTimestamp = at, at
		feed(post{"tick", at, []record.Record{r}})
	}
	tick(last.Add(time.Minute))

	api := httptest.NewServer(func() http.Handler {
		mux := http.NewServeMux()
		chainapi.New(co, co.Capabilities(), chainapi.Stores{Chain: store.ReadChain(s), List: store.ListChains(s), Records: store.ReadRecords(s)}).Register(mux)
		return mux
	}())
	defer api.Close()
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(api.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	type records struct {
		Chain   chain.Chain          `json:"chain"`
		Records []chain.StoredRecord `json:"records"`
	}

	// One chain of every class, as the correlator classified them.
	byClass := map[chain.Class]string{}
	for _, c := range co.List(chain.Filter{Limit: 100000}) {
		if c.State == chain.StateFinal && byClass[c.Class] == "" && !strings.HasPrefix(c.AuditID, "tick-") {
			byClass[c.Class] = c.AuditID
		}
	}
	fromMemory := map[chain.Class]chain.Chain{}
	recsFromMemory := map[chain.Class]records{}
	for _, class := range chain.Classes {
		id := byClass[class]
		if id == "" {
			t.Errorf("the correlator made no %s chain of the scenario", class)
			continue
		}
		if _, ok := co.Chain(id); !ok {
			t.Fatalf("%s chain %s is not in memory", class, id)
		}
		var c chain.Chain
		get("/api/v1/chains/"+url.PathEscape(id), &c)
		fromMemory[class] = c
		var r records
		get("/api/v1/chains/"+url.PathEscape(id)+"/records", &r)
		recsFromMemory[class] = r
	}
	if c := fromMemory[chain.ClassLoop]; len(c.Others) != 1 || c.Others[0].User == "" || len(c.Others[0].SourceIPs) < 2 {
		t.Errorf("loop %s from memory: others %+v, want kas-b's record in full", c.AuditID, c.Others)
	}

	if c := fromMemory[chain.ClassProxied]; c.Entry == nil || c.Peer == nil || c.Entry.APIServerVersion == "" || c.Peer.APIServerVersion == "" {
		t.Errorf("proxied %s from memory: entry %+v, peer %+v: want both with their apiserver's version", c.AuditID, c.Entry, c.Peer)
	}

	// Past the late window the correlator forgets them; the API reads the store.
	tick(last.Add(time.Hour))
	for class, want := range fromMemory {
		id := want.AuditID
		if _, ok := co.Chain(id); ok {
			t.Fatalf("%s chain %s is still in memory an hour later", class, id)
		}
		var got chain.Chain
		get("/api/v1/chains/"+url.PathEscape(id), &got)
		for _, d := range diffFields("", reflect.ValueOf(want), reflect.ValueOf(got)) {
			t.Errorf("%s chain %s, memory vs store: %s", class, id, d)
		}
		var r records
		get("/api/v1/chains/"+url.PathEscape(id)+"/records", &r)
		wantRecs := recsFromMemory[class]
		if !reflect.DeepEqual(r.Records, wantRecs.Records) {
			t.Errorf("%s chain %s: records from the store differ once it left memory", class, id)
		}
		sides := 0
		for _, s := range append([]*chain.Side{want.Entry, want.Peer}, want.Others...) {
			if s != nil {
				sides += len(s.Stages)
			}
		}
		if len(r.Records) != sides || len(r.Records) != want.Records {
			t.Errorf("%s chain %s: %d raw records, want %d (its sides' stages) and %d (its record count)", class, id, len(r.Records), sides, want.Records)
		}
		for _, rec := range r.Records {
			var ev struct {
				AuditID string `json:"auditID"`
				Stage   string `json:"stage"`
			}
			if err := json.Unmarshal(rec.Event, &ev); err != nil || ev.AuditID != id || ev.Stage != rec.Stage {
				t.Errorf("%s chain %s: raw event %.80s... is not its %s record (%v)", class, id, rec.Event, rec.Stage, err)
			}
		}
	}

	// The list reads them back the same way.
	var list struct {
		Chains []chain.Chain `json:"chains"`
	}
	get("/api/v1/chains?since="+url.QueryEscape(begin.Format(time.RFC3339))+"&class=loop&limit=10000", &list)
	var found bool
	for _, c := range list.Chains {
		if c.ID == fromMemory[chain.ClassLoop].ID {
			found = true
			for _, d := range diffFields("", reflect.ValueOf(fromMemory[chain.ClassLoop]), reflect.ValueOf(c)) {
				t.Errorf("loop in the list from the store: %s", d)
			}
		}
	}
	if !found {
		t.Errorf("the loop is not in the stored list of loops: %d chains", len(list.Chains))
	}
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// diffFields lists the exported fields (by path) in which a and b differ.
func diffFields(path string, a, b reflect.Value) []string {
	if a.Kind() == reflect.Pointer {
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return []string{fmt.Sprintf("%s: %v vs %v", path, a.Interface(), b.Interface())}
			}
			return nil
		}
		return diffFields(path, a.Elem(), b.Elem())
	}
	if a.Kind() == reflect.Struct && a.Type() != reflect.TypeOf(time.Time{}) {
		var out []string
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			out = append(out, diffFields(path+"."+f.Name, a.Field(i), b.Field(i))...)
		}
		return out
	}
	if a.Kind() == reflect.Slice && a.Len() == b.Len() && a.Type().Elem().Kind() == reflect.Pointer {
		var out []string
		for i := range a.Len() {
			out = append(out, diffFields(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i))...)
		}
		return out
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		return []string{fmt.Sprintf("%s: %v vs %v", path, a.Interface(), b.Interface())}
	}
	return nil
}
