package server

import (
	"testing"

	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/store"
)

// The chain writer's record of what it wrote covers every chain the correlator can still give a
// new revision (its amendable final chains and a batch on its way to the store), so that a
// revision costs no lookup in the store while the correlator holds the chain.
func TestChainRecordCoversTheAmendableChains(t *testing.T) {
	const batch = 50_000 // correlate's largest batch to the sink
	if got, want := store.DefaultRememberChains, correlate.DefaultJoinOptions().MaxRecent+batch; got < want {
		t.Errorf("store.DefaultRememberChains = %d, want at least %d (correlate's MaxRecent and a batch)", got, want)
	}
}
