package chain

import "time"

// GVR names a group/version/resource ("" group is the core group).
type GVR struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

func (g GVR) String() string {
	if g.Group == "" {
		return g.Version + "/" + g.Resource
	}
	return g.Group + "/" + g.Version + "/" + g.Resource
}

// ServerInfo is what is known of one apiserver.
type ServerInfo struct {
	Name string `json:"name"`
	// Version is taken from the configuration or from the user agent of the apiserver's own
	// loopback requests ("<binary>/v1.36.3 ...", whatever the binary is called), as written
	// there: it parses with ParseVersion.
	Version string `json:"version,omitempty"`
	// Addresses are the IPs the apiserver was seen to connect from (its own loopback requests)
	// or was configured with.
	Addresses []string  `json:"addresses,omitempty"`
	LastSeen  time.Time `json:"last_seen"`
	// Proxied says whether the apiserver was seen to forward any request to a peer.
	Proxied bool `json:"proxied"`
	// Process identifies the apiserver's current process: the UID of its loopback identity,
	// which every start of an apiserver makes up afresh. Empty until a loopback request with
	// a UID was seen.
	Process string `json:"process,omitempty"`
	// History is the apiserver's version history, oldest first (bounded by the correlator): when
	// it was first seen, and each restart and version change since, each of which began a
	// capability epoch.
	History []VersionEpoch `json:"history,omitempty"`
}

// VersionEpoch is one entry of an apiserver's version history: from Since on, it ran Version
// ("" when its user agent gave no version that parses) in the process Process.
type VersionEpoch struct {
	Since   time.Time `json:"since"`
	Version string    `json:"version,omitempty"`
	Process string    `json:"process,omitempty"`
	// Cause is why the entry began: CauseFirstSeen, CauseRestart or CauseVersionChange.
	Cause string `json:"cause"`
}

// Values of VersionEpoch.Cause.
const (
	// CauseFirstSeen: the first loopback request peertrail saw of the apiserver.
	CauseFirstSeen = "first_seen"
	// CauseRestart: a new process of the apiserver, running the same version.
	CauseRestart = "restart"
	// CauseVersionChange: the apiserver runs another version than before (or than configured).
	CauseVersionChange = "version_change"
)

// ServedGVR is one entry of an apiserver's capability view.
type ServedGVR struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	Served   bool   `json:"served"`
	// Assumed says that only answers that could have been forwards' entry records say so
	// (correlate.Capabilities.Assume).
	Assumed  bool      `json:"assumed,omitempty"`
	Since    time.Time `json:"since"`
	LastSeen time.Time `json:"last_seen"`
}

// APIServerView is what GET /api/v1/apiservers reports for one apiserver.
type APIServerView struct {
	ServerInfo
	// Resources lists, per GVR, what the latest evidence says.
	Resources []ServedGVR `json:"resources"`
}

// CapabilityRecord is one line of the capability history: an apiserver, in the version it ran
// (Side.APIServerVersion of the chains: its own loopback requests tell it; "" before the
// first), served or forwarded a group/version/resource from From to Until (the first and the
// end of the last minute it was seen doing so), Requests times. In the minute of a restart into
// another version, each version has a line of what it did. The store keeps the history for as
// long as its rollups.
type CapabilityRecord struct {
	APIServer string `json:"apiserver"`
	// Version is the apiserver's version (v1.36.3), not the resource's.
	Version string `json:"version"`
	// Role is RoleServed or RoleForwarded.
	Role       string    `json:"role"`
	Group      string    `json:"group"`
	APIVersion string    `json:"api_version"`
	Resource   string    `json:"resource"`
	From       time.Time `json:"from"`
	Until      time.Time `json:"until"`
	Requests   int64     `json:"requests"`
}

// Values of CapabilityRecord.Role.
const (
	// RoleServed: the apiserver answered 2xx itself, or as the peer of a forward.
	RoleServed = "served"
	// RoleForwarded: the apiserver was the entry of a forward (proxied or failed).
	RoleForwarded = "forwarded"
)
