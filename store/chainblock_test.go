package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/store"
)

// TestChainNativeBlocksMatchChainRow checks that the engine stores the same rows from the chain
// writer's Native blocks as from ChainRow's values through the generic encoder, for every shape
// of chain (both sides with extras and impersonation, loops, one side, none, a retraction), over
// several blocks: a column added to ChainColumns and ChainRow but not to chainBlock fails it.
func TestChainNativeBlocksMatchChainRow(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 2, 3, 4, 567891000, time.UTC)
	entry := &chain.Side{
		APIServer: "a", Code: 200, User: "alice", UID: "u-1", Groups: []string{"system:authenticated", "devs"},
		Extra:            map[string][]string{"scopes": {"x", "y"}, "authentication.kubernetes.io/credential-id": {"JTI=1"}, "a": nil},
		ImpersonatedUser: "bob", ImpersonatedGroups: []string{"ops"}, ImpersonatedExtra: map[string][]string{"k": {"v"}},
		SourceIPs: []string{"10.0.0.1"}, UserAgent: strings.Repeat("kubectl/v1.34 ", 20), Message: "ünïcødé\ttab\nline\x00", Reason: "NotFound",
		RequestReceived: at, Completed: at.Add(3 * time.Millisecond), Stages: []string{"RequestReceived", "ResponseComplete"}, HasObjects: true,
		APIServerVersion: "v1.35.4+k3s1",
	}
	peer := &chain.Side{APIServer: "b", APIServerVersion: "v1.36.3", Code: 404, User: "bob", SourceIPs: []string{"10.0.0.1", "10.0.0.2"}, Completed: at.Add(time.Millisecond)}
	full := chain.Chain{
		ID: "id\x00a\x001", AuditID: "4a1b", State: chain.StateFinal, Class: chain.ClassLoop,
		Findings:    []chain.Finding{chain.FindingStatusMismatch, chain.FindingIdentityMismatch},
		Explanation: "why", Entry: entry, Peer: peer, Others: []*chain.Side{nil, {APIServer: "c", Code: 500}, {APIServer: "d"}},
		Verb: "get", RequestURI: "/api/v1/pods?x=1", Group: "g", Version: "v1", Resource: "pods", Subresource: "log",
		Namespace: "ns", Name: "n", User: "bob", RealUser: "alice", Code: -1,
		EntryDurationSeconds: 0.003, PeerDurationSeconds: -0.5, ForwardingOverheadSeconds: 1e-9,
		FirstReceived: at.Add(time.Second), LastReceived: at.Add(2 * time.Second), Records: 70, Revision: 3, Evicted: true,
	}
	local := chain.Chain{ID: "l", AuditID: "l", State: chain.StateOpen, Class: chain.ClassLocal,
		Entry: &chain.Side{APIServer: "a", Code: 201}, FirstReceived: at, LastReceived: at, Records: 1}
	peerOnly := chain.Chain{ID: "p", State: chain.StateFinal, Class: chain.ClassBroken, Peer: peer,
		Revision: -1, Records: -2, FirstReceived: at}
	retracted := full
	retracted.State = store.StateRetracted
	shapes := []*chain.Chain{&full, &local, &peerOnly, {}, &retracted}
	var chains []*chain.Chain
	var rows [][]any
	for i := range 700 {
		for j, c := range shapes {
			c := *c
			c.ID = fmt.Sprintf("%s-%d-%d", c.ID, j, i)
			chains = append(chains, &c)
			rows = append(rows, store.ChainRow(&c))
		}
	}
	blocks := sameAsRows(t, s, "chains", store.ChainColumns, rows, func(table string) error {
		data, err := store.EncodeChainsNative(chains)
		if err != nil {
			return err
		}
		return s.InsertNative(ctx, table, store.ChainColumns, data)
	})
	t.Logf("%d chains, %s", len(chains), blocks)
	res, err := s.Query(ctx, "SELECT entry_extra, other_apiservers, other_codes, findings, peer_apiserver_version, version FROM peertrail.chains_blocks WHERE id = {id:String}",
		map[string]string{"id": full.ID + "-0-0"})
	if err != nil || len(res.Rows) != 1 {
		t.Fatalf("the full chain: %v %v", res, err)
	}
	for i, want := range []string{`{'a':[],'authentication.kubernetes.io/credential-id':['JTI=1'],'scopes':['x','y']}`, `['c','d']`, `[500,0]`,
		`['status_mismatch','identity_mismatch']`, "v1.36.3"} {
		if got := res.Rows[0][i]; got != want {
			t.Errorf("column %d = %q, want %q", i, got, want)
		}
	}
}
