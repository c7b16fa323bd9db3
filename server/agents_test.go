package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/ingest/ship"
)

// The gate reads the receiver's account of the agents through gateAgents: every field its
// checks use arrives, what an agent gave up for an aggregator included (agent_spool).
func TestGateAgentsCarriesWhatTheGateChecks(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	in := []ingest.AgentStatus{{
		Name: "node-a", APIServers: []string{"kas-a"}, Stream: "s", Stored: 10, Head: 12,
		Heard: now, StoredTime: now.Add(-time.Second), LagBytes: 5, LagSeconds: 1.5, SpoolMaxBytes: 100,
		Aggregators: []ship.AggregatorState{
			{Name: "agg-0", BacklogBytes: 1},
			{Name: "agg-1", BacklogBytes: 90, Skipped: ship.Skipped{Frames: 2, Events: 7, Bytes: 3, Last: now, From: now.Add(-time.Hour), To: now.Add(-time.Minute)}},
		},
	}, {Name: "node-b", LagSeconds: -1}}
	want := []gate.Agent{{
		Name: "node-a", Heard: now, StoredTime: now.Add(-time.Second), LagBytes: 5, LagSeconds: 1.5, SpoolMaxBytes: 100,
		Aggregators: []gate.AgentAggregator{
			{Name: "agg-0", BacklogBytes: 1},
			{Name: "agg-1", BacklogBytes: 90, GaveUpEvents: 7, GaveUpLast: now, GaveUpFrom: now.Add(-time.Hour), GaveUpTo: now.Add(-time.Minute)},
		},
	}, {Name: "node-b", LagSeconds: -1}}
	if got := gateAgents(in); !reflect.DeepEqual(got, want) {
		t.Fatalf("gateAgents:\n got %+v\nwant %+v", got, want)
	}
}
