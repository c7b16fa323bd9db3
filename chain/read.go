package chain

import (
	"context"
	"encoding/json"
	"time"
)

// What the chain API reads and answers. The lookups are its ways into the store (package store
// implements them over its named queries); requests call them concurrently.

// Filter selects chains: the chain API's list, from memory and from the store (ListLookup).
type Filter struct {
	Class     Class
	Finding   Finding
	APIServer string // entry or peer
	Since     time.Time
	Limit     int
}

// Lookup finds a final chain that is no longer in memory (the store's chains table). It
// returns (nil, nil) when there is none.
type Lookup func(ctx context.Context, auditID string) (*Chain, error)

// ChainsLookup returns every stored chain with auditID (the store's chains table), oldest
// first; none when there is none.
type ChainsLookup func(ctx context.Context, auditID string) ([]*Chain, error)

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

// HistoryLookup returns the capability history between since and until (the store's).
type HistoryLookup func(ctx context.Context, since, until time.Time) ([]CapabilityRecord, error)

// ChainAnswer is what GET /api/v1/chains/{auditID} answers: the chain asked for, its fields
// at the top level as they always were, and the other chains of its auditID.
type ChainAnswer struct {
	*Chain
	// ChainsWithAuditID counts the chains (requests) with the auditID, this one included.
	ChainsWithAuditID int `json:"chains_with_audit_id"`
	// OtherChains are the others, oldest first.
	OtherChains []*Chain `json:"other_chains,omitempty"`
	// Warning says that the store could not be asked: only the chains in memory are counted.
	Warning string `json:"warning,omitempty"`
}
