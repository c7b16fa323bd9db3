// Package chain is peertrail's vocabulary of a request as the apiservers recorded it: the chain
// and its sides, its class, findings and state, what is known of each apiserver (its versions,
// what it served or forwarded), the counts the gate reads and the ways into the store that the
// chain API asks (the lookups). The correlator makes chains, the store keeps them, the chain
// API serves them, and the gate, the dashboards, the alerts and the CLI speak of them. It
// imports nothing of peertrail's, so that each of them can speak of a chain without depending
// on the engine that makes one, as Kubernetes keeps its audit Event type apart from the
// backends that write it.
package chain

import (
	"slices"
	"strings"
	"time"
)

// Class is what happened to one request, exactly one per chain.
type Class string

// The classes.
const (
	// ClassLocal: the entry apiserver served the request itself.
	ClassLocal Class = "local"
	// ClassProxied: the entry forwarded it to one peer, which served it; both records exist.
	ClassProxied Class = "proxied"
	// ClassProxyFailed: the entry tried to forward and answered an error (the 503s); no peer record.
	ClassProxyFailed Class = "proxy_failed"
	// ClassMisleading404: the entry answered "the server could not find the requested
	// resource" for a group/version/resource another apiserver serves.
	ClassMisleading404 Class = "misleading_404"
	// ClassBroken: one side of a forwarding is missing (a peer record without its entry
	// record, or an entry-only success for a resource its apiserver does not serve).
	ClassBroken Class = "broken"
	// ClassLoop: records from three or more apiservers, or proof of a second hop.
	ClassLoop Class = "loop"
	// ClassInternal: the apiservers' own peer-discovery fetches (/api, /apis as system:apiserver).
	ClassInternal Class = "internal"
)

// Classes lists every class, in a stable order (for metrics, dashboards and reports).
var Classes = []Class{ClassLocal, ClassProxied, ClassProxyFailed, ClassMisleading404, ClassBroken, ClassLoop, ClassInternal}

// Finding is something notable about a chain; a chain has zero or more.
type Finding string

// The findings.
const (
	FindingPeerAuditMissing       Finding = "peer_audit_missing"
	FindingEntryAuditMissing      Finding = "entry_audit_missing"
	FindingIdentityMismatch       Finding = "identity_mismatch"
	FindingImpersonationFlattened Finding = "impersonation_flattened"
	FindingStatusMismatch         Finding = "status_mismatch"
	// FindingEntryStarting: the entry answered a 403, a 5xx or a misleading 404 within
	// StartingWindow of its process's start: restart noise, expected while it replaces itself.
	FindingEntryStarting Finding = "entry_starting"
	// FindingPeerDown: a forward failed, or its peer record is missing, while an apiserver
	// that served the resource was silent in its audit stream (killed or restarting).
	FindingPeerDown Finding = "peer_down"
	// FindingEntryDown: a forward's peer record has no entry record, and the apiserver it
	// came from was silent in its audit stream (its record died with its process).
	FindingEntryDown Finding = "entry_down"
	// FindingEntryStopping: the entry answered a 5xx right before its own audit stream fell
	// silent (it was stopping).
	FindingEntryStopping Finding = "entry_stopping"
	// FindingAuditIDReused: more records arrived for the chain, or for its auditID, than one
	// request makes (correlate.MaxChainRecords); the excess was not joined. A client sets its
	// own Audit-ID.
	FindingAuditIDReused Finding = "audit_id_reused"
)

// Findings lists every finding, in a stable order.
var Findings = []Finding{FindingPeerAuditMissing, FindingEntryAuditMissing, FindingIdentityMismatch, FindingImpersonationFlattened, FindingStatusMismatch, FindingAuditIDReused, FindingEntryStarting, FindingPeerDown, FindingEntryDown, FindingEntryStopping}

// NoiseFindings are the findings that explain a chain as restart noise: the gate judges them
// by duration against a budget instead of pausing at once.
var NoiseFindings = []Finding{FindingEntryStarting, FindingPeerDown, FindingEntryDown, FindingEntryStopping}

// State says whether a chain may still change.
type State string

const (
	// StateOpen: records may still arrive.
	StateOpen State = "open"
	// StateFinal: no record arrived for the chain window; the chain is decided.
	StateFinal State = "final"
)

// Side is one apiserver's view of a request: what its audit records say.
type Side struct {
	APIServer string `json:"apiserver"`
	// APIServerVersion is the version the apiserver ran when it received the request, as the
	// correlator's version history had it when it last classified the chain (the epoch that
	// holds RequestReceived, see correlate.Capabilities.VersionAt): "" when unknown. It is the
	// apiserver's version (v1.36.3), not the resource's (Chain.Version). The capability
	// history counts what each version served or forwarded by it.
	APIServerVersion string `json:"apiserver_version,omitempty"`
	// Code is the response code it recorded (0 if no ResponseComplete/ResponseStarted arrived).
	Code   int32    `json:"code"`
	User   string   `json:"user"`
	UID    string   `json:"uid,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Extra is the user's extra attributes.
	Extra map[string][]string `json:"extra,omitempty"`
	// ImpersonatedUser is set when this side recorded impersonation.
	ImpersonatedUser   string              `json:"impersonated_user,omitempty"`
	ImpersonatedGroups []string            `json:"impersonated_groups,omitempty"`
	ImpersonatedExtra  map[string][]string `json:"impersonated_extra,omitempty"`
	SourceIPs          []string            `json:"source_ips,omitempty"`
	UserAgent          string              `json:"user_agent,omitempty"`
	// Message and Reason come from responseStatus (only the peer records them on a forward).
	Message string `json:"message,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// RequestReceived is requestReceivedTimestamp; Completed the stageTimestamp of the last
	// stage seen (ResponseComplete when it arrived).
	RequestReceived time.Time `json:"request_received"`
	Completed       time.Time `json:"completed"`
	// Stages are the audit stages seen from this apiserver, in arrival order.
	Stages []string `json:"stages"`
	// HasObjects says whether any record carried a request or response object (only the peer's
	// do on a forward).
	HasObjects bool `json:"has_objects"`
}

// Duration is Completed minus RequestReceived, or 0 when either is unknown.
func (s *Side) Duration() time.Duration {
	if s == nil || s.RequestReceived.IsZero() || s.Completed.IsZero() {
		return 0
	}
	return s.Completed.Sub(s.RequestReceived)
}

// Chain is one request as seen by every apiserver that recorded it.
type Chain struct {
	// ID is unique per chain even when a client reuses an Audit-ID: the auditID plus the
	// first record's apiserver and request time.
	ID       string    `json:"id"`
	AuditID  string    `json:"audit_id"`
	State    State     `json:"state"`
	Class    Class     `json:"class"`
	Findings []Finding `json:"findings"`
	// Explanation says in words why the chain got its class.
	Explanation string `json:"explanation"`

	Entry *Side `json:"entry"`
	Peer  *Side `json:"peer"`
	// Others are further apiservers' records (only in loops).
	Others []*Side `json:"others,omitempty"`

	Verb        string `json:"verb"`
	RequestURI  string `json:"request_uri"`
	Group       string `json:"group"`
	Version     string `json:"version"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`

	// User is the effective user: the impersonated user when the entry shows impersonation.
	User string `json:"user"`
	// RealUser is who authenticated, when different from User (impersonation).
	RealUser string `json:"real_user,omitempty"`
	// Code is what the client got: the entry's code (the peer's when only it was recorded).
	Code int32 `json:"code"`

	// EntryDuration, PeerDuration and ForwardingOverhead (entry minus peer) in seconds;
	// 0 where a side is missing.
	EntryDurationSeconds      float64 `json:"entry_duration_seconds"`
	PeerDurationSeconds       float64 `json:"peer_duration_seconds"`
	ForwardingOverheadSeconds float64 `json:"forwarding_overhead_seconds"`

	// FirstReceived and LastReceived are when peertrail received the chain's first and last records.
	FirstReceived time.Time `json:"first_received"`
	LastReceived  time.Time `json:"last_received"`
	// Records is how many audit records arrived for the chain: those it holds, at most
	// correlate.MaxChainRecords, and those it dropped beyond that (then it has
	// FindingAuditIDReused).
	Records int `json:"records"`
	// Revision counts how often the chain was finalised: above 1 when a late record reopened
	// it. The store keeps the highest revision.
	Revision int `json:"revision"`
	// Evicted says the chain was finalised early because too many chains were open.
	Evicted bool `json:"evicted,omitempty"`
}

// Clone returns a copy of c with sides of its own (Entry, Peer and Others point to copies), for
// a sink that keeps chains (the correlator reuses the sides of those it handed over). The
// lists and maps are shared: nobody changes them.
func (c *Chain) Clone() Chain {
	out := *c
	own := func(s *Side) *Side {
		if s == nil {
			return nil
		}
		cp := *s
		return &cp
	}
	out.Entry, out.Peer = own(c.Entry), own(c.Peer)
	if c.Others != nil {
		out.Others = make([]*Side, len(c.Others))
		for i, s := range c.Others {
			out.Others[i] = own(s)
		}
	}
	return out
}

// RequestTime is when the request reached the first apiserver that recorded it (the chains
// table's request_time): the entry's requestReceivedTimestamp, else the peer's, else when
// peertrail first received a record.
func (c *Chain) RequestTime() time.Time {
	for _, s := range []*Side{c.Entry, c.Peer} {
		if s != nil && !s.RequestReceived.IsZero() {
			return s.RequestReceived
		}
	}
	return c.FirstReceived
}

// HasFinding reports whether the chain has finding f.
func (c *Chain) HasFinding(f Finding) bool {
	for _, x := range c.Findings {
		if x == f {
			return true
		}
	}
	return false
}

// SortChains orders chains oldest first: by first receipt, then request time, then ID (the
// store's order), whether they come from memory or from the store.
func SortChains(chains []*Chain) {
	slices.SortStableFunc(chains, func(a, b *Chain) int {
		if c := a.FirstReceived.Compare(b.FirstReceived); c != 0 {
			return c
		}
		if c := a.RequestTime().Compare(b.RequestTime()); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// ForwardedClasses are the classes of chains whose entry apiserver forwarded the request
// (served by the peer, failed, one side's record missing, or forwarded more than once): what
// the entry's own apiserver_rerouted_request_total counts.
var ForwardedClasses = []Class{ClassProxied, ClassProxyFailed, ClassBroken, ClassLoop}
