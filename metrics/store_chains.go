package metrics

// Store chain sink: what the writer remembers of the chains it wrote, so that it asks the store
// only about chains it cannot know (a replay after a restart, a late revision of a final chain).
// The record is bounded (serve's default: 500,000 chains); these say how big it is and how often
// the store is still asked.
const (
	// StoreChainsRemembered is the number of chains whose stored version the writer remembers.
	StoreChainsRemembered = "peertrail_store_chains_remembered"
	// StoreChainsRememberedBytes is an estimate of the memory of that record.
	StoreChainsRememberedBytes = "peertrail_store_chains_remembered_bytes"
	// StoreChainsLookedUpTotal counts chains whose stored version the writer had to read from
	// the store before writing them (not in its record, or superseding a final row).
	StoreChainsLookedUpTotal = "peertrail_store_chains_looked_up_total"
)
