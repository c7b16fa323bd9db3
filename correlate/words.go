package correlate

import "github.com/peertrail/peertrail/chain"

// The chain's words, in package chain since it left the engine; these names go once every
// reference says chain.

type (
	Class            = chain.Class
	Finding          = chain.Finding
	State            = chain.State
	Side             = chain.Side
	Chain            = chain.Chain
	GVR              = chain.GVR
	ServerInfo       = chain.ServerInfo
	VersionEpoch     = chain.VersionEpoch
	ServedGVR        = chain.ServedGVR
	APIServerView    = chain.APIServerView
	CapabilityRecord = chain.CapabilityRecord
	Totals           = chain.Totals
	NoiseEpisode     = chain.NoiseEpisode
	Filter           = chain.Filter
	Lookup           = chain.Lookup
	ChainsLookup     = chain.ChainsLookup
	ListLookup       = chain.ListLookup
	RecordsLookup    = chain.RecordsLookup
	StoredRecord     = chain.StoredRecord
	HistoryLookup    = chain.HistoryLookup
	ChainAnswer      = chain.ChainAnswer
)

const (
	CauseFirstSeen                = chain.CauseFirstSeen
	CauseRestart                  = chain.CauseRestart
	CauseVersionChange            = chain.CauseVersionChange
	ClassBroken                   = chain.ClassBroken
	ClassInternal                 = chain.ClassInternal
	ClassLocal                    = chain.ClassLocal
	ClassLoop                     = chain.ClassLoop
	ClassMisleading404            = chain.ClassMisleading404
	ClassProxied                  = chain.ClassProxied
	ClassProxyFailed              = chain.ClassProxyFailed
	FindingAuditIDReused          = chain.FindingAuditIDReused
	FindingEntryAuditMissing      = chain.FindingEntryAuditMissing
	FindingEntryDown              = chain.FindingEntryDown
	FindingEntryStarting          = chain.FindingEntryStarting
	FindingEntryStopping          = chain.FindingEntryStopping
	FindingIdentityMismatch       = chain.FindingIdentityMismatch
	FindingImpersonationFlattened = chain.FindingImpersonationFlattened
	FindingPeerAuditMissing       = chain.FindingPeerAuditMissing
	FindingPeerDown               = chain.FindingPeerDown
	FindingStatusMismatch         = chain.FindingStatusMismatch
	RoleForwarded                 = chain.RoleForwarded
	RoleServed                    = chain.RoleServed
	StateFinal                    = chain.StateFinal
	StateOpen                     = chain.StateOpen
)

var (
	Classes          = chain.Classes
	Findings         = chain.Findings
	NoiseFindings    = chain.NoiseFindings
	ForwardedClasses = chain.ForwardedClasses
	SortChains       = chain.SortChains
	ParseVersion     = chain.ParseVersion
	AgentVersion     = chain.AgentVersion
	SameRelease      = chain.SameRelease
)
