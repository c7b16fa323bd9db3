package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// appendChainRow writes exactly what the generic encoder writes of ChainRow, column for
// column, for every shape of chain: a column added to ChainColumns and ChainRow but not here
// fails this test.
func TestChainRowBinaryMatchesChainRow(t *testing.T) {
	at := time.Date(2026, 12, 1, 2, 3, 4, 567891000, time.UTC)
	entry := &chain.Side{
		APIServer: "a", Code: 200, User: "alice", UID: "u-1", Groups: []string{"system:authenticated", "devs"},
		Extra:            map[string][]string{"scopes": {"x", "y"}, "authentication.kubernetes.io/credential-id": {"JTI=1"}, "a": nil},
		ImpersonatedUser: "bob", ImpersonatedGroups: []string{"ops"}, ImpersonatedExtra: map[string][]string{"k": {"v"}},
		SourceIPs: []string{"10.0.0.1"}, UserAgent: strings.Repeat("kubectl/v1.34 ", 20), Message: "ünïcødé\ttab\nline", Reason: "NotFound",
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
	retracted.State = StateRetracted
	for name, c := range map[string]*chain.Chain{"full": &full, "local": &local, "peer only": &peerOnly, "empty": {}, "retracted": &retracted} {
		want, err := EncodeRowBinary(ChainColumns, [][]any{ChainRow(c)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := appendChainRow(nil, c); !bytes.Equal(got, want) {
			t.Errorf("%s: appendChainRow differs from the generic encoding of ChainRow:\n got %q\nwant %q", name, got, want)
		}
	}
	// The stream is the rows one after the other, whatever the reads' sizes.
	chains := []*chain.Chain{&full, &local, &peerOnly}
	var want []byte
	for range 2000 {
		for _, c := range chains {
			want = appendChainRow(want, c)
		}
	}
	var many []*chain.Chain
	for range 2000 {
		many = append(many, chains...)
	}
	var got bytes.Buffer
	if _, err := got.ReadFrom(chainStream(many)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("chainStream: %d bytes, want the %d of the rows one after the other", got.Len(), len(want))
	}
	// A chain without extras or loops (nearly all of them) encodes without allocating.
	c := full
	c.Others = nil
	c.Entry = &chain.Side{APIServer: "a", Code: 200, User: "alice", Groups: entry.Groups, SourceIPs: entry.SourceIPs, Stages: entry.Stages}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = appendChainRow(buf[:0], &c) }); n != 0 {
		t.Errorf("appendChainRow allocates %v times a chain, want 0", n)
	}
}

// The record forgets its oldest chains beyond its bound, and the floor rises past them, so a
// chain it forgot is one that may be stored (looked up), never one taken for new.
func TestWrittenChainsBound(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := newWrittenChains(3)
	r.setFloor(base)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	ids := []string{"c1", "c2", "c3", "c4", "c5"}
	for i, id := range ids {
		if r.mayBeStored(at(i + 1)) {
			t.Fatalf("%s, first received after the floor, may be stored", id)
		}
		r.put(r.key(id), uint64(i+1), at(i+1))
		r.put(r.key(id), 0, at(i+1)) // a lower version does not replace a higher one
	}
	if r.entries() != 3 {
		t.Errorf("%d entries, want 3", r.entries())
	}
	for i, id := range ids {
		v, ok := r.version(r.key(id))
		if remembered := i >= 2; ok != remembered || (ok && v != uint64(i+1)) {
			t.Errorf("%s: version %d, %v", id, v, ok)
		}
		if forgotten := i < 2; forgotten && !r.mayBeStored(at(i+1)) {
			t.Errorf("%s was forgotten, but a chain first received with it is not looked up", id)
		}
	}
	if r.mayBeStored(at(3)) {
		t.Errorf("the floor rose past the chains still remembered")
	}
	r.forget(r.key("c5"))
	r.unsure()
	if !r.mayBeStored(at(100)) {
		t.Errorf("after a failed insert, a chain is taken for new before the table is read again")
	}
	if r.bytes() <= 0 {
		t.Errorf("bytes %d", r.bytes())
	}
}

// The record against a model of what it promises, over random puts, forgets and drops: a chain
// is remembered, with the highest version put, if it was recorded among the last maxEntries
// chains recorded and not forgotten since; the floor is the latest first receipt of a chain
// that fell out.
func TestWrittenChainsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, maxEntries := range []int{1, 7, 100, 5000} {
		r := newWrittenChains(maxEntries)
		type entry struct {
			version uint64
			seq     int // when it was last recorded as new
			first   time.Time
		}
		model := map[chainKey]*entry{}
		var recordings []time.Time // the first receipt of each chain recorded as new, in order
		var recorded []chainKey    // and its key
		byKey := map[chainKey]time.Time{}
		ids := 3 * maxEntries
		for op := range 20 * maxEntries {
			k := r.key(fmt.Sprint("chain-", rng.IntN(ids)))
			switch {
			case rng.IntN(10) == 0:
				r.forget(k)
				delete(model, k)
			default:
				v := uint64(rng.IntN(50))
				first, ok := byKey[k]
				if !ok {
					first = base.Add(time.Duration(op) * time.Millisecond)
					byKey[k] = first
				}
				if e := model[k]; e != nil {
					e.version = max(e.version, v)
				} else {
					recordings, recorded = append(recordings, first), append(recorded, k)
					model[k] = &entry{version: v, seq: len(recordings), first: first}
					// The ring's oldest place comes round.
					if out := len(recorded) - maxEntries - 1; out >= 0 {
						if e := model[recorded[out]]; e != nil && e.seq == out+1 {
							delete(model, recorded[out])
						}
					}
				}
				r.put(k, v, first)
			}
		}
		// The floor: the newest first receipt of the chains recorded before the last
		// maxEntries, forgotten or not: their places in the ring have come round.
		var floor time.Time
		for _, first := range recordings[:max(len(recordings)-maxEntries, 0)] {
			if first.After(floor) {
				floor = first
			}
		}
		if !r.floor.Equal(floor) {
			t.Errorf("max %d: floor %v, model %v", maxEntries, r.floor, floor)
		}
		if r.entries() != len(model) {
			t.Errorf("max %d: %d entries, model %d", maxEntries, r.entries(), len(model))
		}
		for id := range ids {
			k := r.key(fmt.Sprint("chain-", id))
			v, ok := r.version(k)
			e := model[k]
			if ok != (e != nil) || ok && v != e.version {
				t.Fatalf("max %d: chain-%d: record (%d, %v), model %+v", maxEntries, id, v, ok, e)
			}
		}
		if perEntry := r.bytes() / maxEntries; maxEntries >= 5000 && perEntry > 48 {
			t.Errorf("max %d: %d bytes an entry (ring %d, index %d)", maxEntries, perEntry, cap(r.ring), len(r.index))
		}
	}
}
