package chain

import "time"

// Totals are counts of final chains over a stretch of time.
type Totals struct {
	Chains    map[Class]int   `json:"chains"`
	Findings  map[Finding]int `json:"findings"`
	Forwarded int             `json:"forwarded"` // proxied and proxy_failed: every forwarding attempt
	// Forwarded5xx are forwarding attempts the client got a 5xx for.
	Forwarded5xx int `json:"forwarded_5xx"`
	// ResourceRequests are chains of resource requests (every class but internal).
	ResourceRequests int `json:"resource_requests"`
	// Noise counts, per class, the chains a restart-noise finding (NoiseFindings) explains;
	// Forwarded5xxNoise the forwarding 5xx among them. They are in Chains and Forwarded5xx
	// too: the gate judges them by Episodes instead.
	Noise             map[Class]int `json:"noise"`
	Forwarded5xxNoise int           `json:"forwarded_5xx_noise"`
	// Episodes are the restart-noise episodes with a chain in the stretch, oldest first.
	Episodes []NoiseEpisode `json:"episodes"`
}

// NoiseEpisode is one stretch of restart noise: the chains one restart of one apiserver
// explains (its process start for entry_starting, its silence for peer_down).
type NoiseEpisode struct {
	Finding Finding `json:"finding"`
	// APIServer is the apiserver whose restart explains the chains: the starting entry, or
	// the peer that was down.
	APIServer string `json:"apiserver"`
	// Since is when its process started (entry_starting) or its audit stream fell silent
	// (peer_down).
	Since time.Time `json:"since"`
	// First and Last are the request times of the first and the last chain explained; their
	// difference is how long the noise lasted.
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	Chains int       `json:"chains"`
	// Classes counts the explained chains by class.
	Classes map[Class]int `json:"classes"`
}

// Duration is how long the noise lasted: from its first chain's request to its last's.
func (e NoiseEpisode) Duration() time.Duration { return e.Last.Sub(e.First) }
