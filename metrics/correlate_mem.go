package metrics

// Correlate memory: what the correlator holds for its open and recently final chains. Every
// part is bounded by the chains held (--max-open, the late window), not by what the process
// has seen; these say how close to the bounds it is.
const (
	// CorrelateRecentChains is the number of final chains kept in memory for the late window
	// (a late record reopens them; the chain API serves them).
	CorrelateRecentChains = "peertrail_correlate_recent_chains"
	// CorrelateChainSlots is the number of chain slots allocated: the most chains held at
	// once, open and recent together, rounded up to a page. Slots are reused, not returned.
	CorrelateChainSlots = "peertrail_correlate_chain_slots"
	// CorrelateInternedValues is, by LabelTable (strings, identities, addresses, targets,
	// verdicts), the distinct values the chains in memory refer to, and (decoded) the values
	// the correlator's frame decoder shares between records.
	CorrelateInternedValues = "peertrail_correlate_interned_values"
	// CorrelateMemoryBytes is, by LabelTable (chains, each table of interned values, and
	// decoded), an estimate of the bytes the correlator holds for its chains.
	CorrelateMemoryBytes = "peertrail_correlate_memory_bytes"
)
