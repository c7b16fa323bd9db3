package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/storetest"
)

// TestMisleading404sServedByNamesWhereToGo: served_by names the apiservers the request should
// have gone to, never the one that answered 404, even when that one served the resource itself
// later in the window (after its own upgrade).
func TestMisleading404sServedByNamesWhereToGo(t *testing.T) {
	s := engine(t)
	at := time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Hour) // a window of its own, apart from the scenario, within retention
	final := func(id string, class chain.Class, entry, peer string, code int32, off time.Duration) chain.Chain {
		c := chain.Chain{ID: id, AuditID: id, State: chain.StateFinal, Class: class, Verb: "get",
			RequestURI: "/apis/widgets.example.com/v1/widgets", Group: "widgets.example.com", Version: "v1", Resource: "widgets",
			User: "alice", Code: code, FirstReceived: at.Add(off), LastReceived: at.Add(off), Records: 2, Revision: 1,
			Entry: &chain.Side{APIServer: entry, Code: code, RequestReceived: at.Add(off), Completed: at.Add(off + time.Millisecond)}}
		if peer != "" {
			c.Peer = &chain.Side{APIServer: peer, Code: code, RequestReceived: at.Add(off), Completed: at.Add(off + time.Millisecond)}
		}
		return c
	}
	chains := []chain.Chain{
		final("m404-1", chain.ClassMisleading404, "kas-a", "", 404, time.Second),
		final("m404-2", chain.ClassProxied, "kas-b", "kas-c", 200, 2*time.Second),
		final("m404-3", chain.ClassLocal, "kas-a", "", 200, time.Minute), // kas-a after its upgrade
	}
	if err := storetest.Write(context.Background(), s, nil, chains); err != nil {
		t.Fatal(err)
	}
	r := runNamed(t, "misleading_404s", map[string]string{
		"since": store.FormatTime(at), "until": store.FormatTime(at.Add(time.Hour)),
	})
	if len(r.Rows) != 1 {
		t.Fatalf("%d rows, want 1: %v", len(r.Rows), r.Rows)
	}
	if got := r.Value(0, "answered_404"); got != "kas-a" {
		t.Errorf("answered_404 %q, want kas-a", got)
	}
	if got := r.Value(0, "served_by"); got != "['kas-c']" {
		t.Errorf("served_by %s, want ['kas-c'] (kas-a answered the 404s)", got)
	}
}
