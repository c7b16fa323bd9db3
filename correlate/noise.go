package correlate

// Restart noise: what an apiserver's start, stop or silence makes of the chains around it
// (entry_starting, entry_stopping, peer_down), added after a chain is classified.

import (
	"fmt"
	"slices"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// entryStarting reports whether apiserver's process that answered at t was starting
// (Capabilities.Starting, StartingWindow), and since when.
func (k *DefaultClassifier) entryStarting(apiserver string, t time.Time) (since time.Time, ok bool) {
	if since, ok = k.Caps.Starting(apiserver, t, StartingWindow); ok {
		return since, true
	}
	// A new process can answer a client a moment before its first loopback request reaches
	// its audit stream (measured: a replaced apiserver's 404 18 ms before).
	if s2, ok2 := k.Caps.Starting(apiserver, t.Add(startLead), StartingWindow); ok2 && s2.After(t) {
		return s2, true
	}
	return time.Time{}, false
}

// noise adds the restart-noise findings (see the rules above single, in classify.go) to a
// classified chain.
func (k *DefaultClassifier) noise(c *draft) {
	if c.Resource == "" || c.Class == chain.ClassInternal || c.Class == chain.ClassLoop {
		return
	}
	t := c.when()
	if e := c.Entry; e != nil && (e.Code == 403 || e.Code >= 500 || c.Class == chain.ClassMisleading404 || c.Class == chain.ClassProxyFailed) {
		if since, ok := k.entryStarting(e.APIServer, t); ok {
			c.Findings = append(c.Findings, chain.FindingEntryStarting)
			when := startedWhen(since, t)
			c.Explanation += fmt.Sprintf("; %s was starting (its new process's first request in its audit stream %s): restart noise (%s)",
				e.APIServer, when, chain.FindingEntryStarting)
			c.noiseOf, c.noiseSince = e.APIServer, since
			return
		}
	}
	if c.Class == chain.ClassProxyFailed || c.Class == chain.ClassBroken && c.HasFinding(chain.FindingPeerAuditMissing) {
		entry := ""
		if c.Entry != nil {
			entry = c.Entry.APIServer
		}
		if p := c.Peer; p != nil && !complete(p) {
			// The peer recorded the request's start, not its end, and its stream fell silent
			// right after: its process died with the rest of the request's audit.
			last := p.RequestReceived
			if p.Completed.After(last) {
				last = p.Completed
			}
			if from, to, down := k.Caps.DownAt(p.APIServer, last.Add(time.Second), c.streamNow); down && !from.Before(last) {
				k.peerDown(c, p.APIServer, from, to)
			}
			return
		}
		// The request's start, and the moment the entry answered: a peer killed while it
		// served a request fails it then, after a start when the peer was still alive.
		times := []time.Time{t}
		if e := c.Entry; e != nil && e.Completed.After(t) {
			times = append(times, e.Completed)
		}
		servers := k.Caps.Servers()
		for _, at := range times {
			for _, srv := range servers {
				if srv.Name == entry {
					continue
				}
				// For a missing peer record: the audit of a killed peer's last 0-1 s is lost
				// with its process, so its stream is silent from before the request it served.
				from, to, down := k.Caps.DownAt(srv.Name, at, c.streamNow)
				if !down || at.Sub(from) > peerDownLookback {
					continue
				}
				if served, known := k.Caps.Serves(srv.Name, c.gvr(), from); !known || !served {
					continue
				}
				k.peerDown(c, srv.Name, from, to)
				return
			}
		}
		// Only a failure: a forward the peer answered was not failed by its start, whatever
		// lost its record.
		if c.Entry != nil && c.Entry.Code >= 500 && k.peerStarting(c, entry, servers, times) {
			return
		}
	}
	if c.Class == chain.ClassProxied && c.Entry.Code >= 500 && c.Peer != nil {
		// The peer answered a 5xx while its restarted process was starting, as an entry's own
		// first answers may be (entry_starting).
		if k.peerStarting(c, c.Entry.APIServer, []chain.ServerInfo{{Name: c.Peer.APIServer}}, []time.Time{t}) {
			return
		}
	}
	if c.Class == chain.ClassMisleading404 {
		// The entry answered 404 while the apiserver that serves the resource was starting
		// again: the entry forwards to it once it has the new process's discovery (measured:
		// a restarted peer is proxied to within ~0.2 s of its readiness; meanwhile the
		// entries answer 404). While that apiserver was down instead, the 404s are real: a
		// stopped peer's clients get them for as long as it stays away.
		entry := c.Entry.APIServer
		for _, srv := range k.Caps.Servers() {
			if srv.Name == entry {
				continue
			}
			since, starting := k.Caps.Starting(srv.Name, t, StartingWindow)
			if !starting {
				continue
			}
			if served, known := k.Caps.Serves(srv.Name, c.gvr(), since.Add(-time.Nanosecond)); !known || !served {
				continue
			}
			// It serves the resource again only if it restarted into the same version (or
			// its new process was seen to serve it); a new version may not.
			if served, known := k.Caps.Serves(srv.Name, c.gvr(), t); known && !served || !known && k.Caps.EpochCause(srv.Name, since) != chain.CauseRestart {
				continue
			}
			c.Findings = append(c.Findings, chain.FindingPeerDown)
			c.Explanation += fmt.Sprintf("; %s, which served %s before it restarted, was starting (its new process's first request %s before): restart noise (%s)",
				srv.Name, c.gvr(), t.Sub(since).Round(time.Millisecond), chain.FindingPeerDown)
			c.noiseOf, c.noiseSince = srv.Name, since
			return
		}
		return
	}
	if c.Class == chain.ClassBroken && c.Entry == nil && c.Peer != nil && c.HasFinding(chain.FindingEntryAuditMissing) {
		// A forward's peer record alone: the entry that forwarded it (an apiserver at the
		// address it came from) was silent at the time, its audit lost with its process.
		addr := lastIP(c.Peer.SourceIPs)
		for _, srv := range k.Caps.Servers() {
			if srv.Name == c.Peer.APIServer || !slices.Contains(srv.Addresses, addr) {
				continue
			}
			if from, to, down := k.Caps.DownAt(srv.Name, t, c.streamNow); down && t.Sub(from) <= peerDownLookback {
				k.silent(c, chain.FindingEntryDown, srv.Name, from, to, "which forwards from "+addr+", was down")
				return
			}
		}
		return
	}
	if e := c.Entry; e != nil && e.Code >= 500 {
		// The entry answered a 5xx just before its own stream fell silent: it was stopping
		// (measured: a 1.35 apiserver stopping gracefully answered its last forwards 503
		// "Error getting ip and port info of the remote server while proxying").
		last := e.Completed
		if last.Before(t) {
			last = t
		}
		// A stop is followed by a start (the silence ends) or is recent; an apiserver whose
		// stream has been silent for long was not stopping at the time, it is gone.
		if from, to, down := k.Caps.DownAt(e.APIServer, last.Add(stoppingWindow), c.streamNow); down && !from.Before(last) &&
			(!to.IsZero() || c.streamNow.Sub(from) <= peerDownLookback) {
			k.silent(c, chain.FindingEntryStopping, e.APIServer, from, to, "was stopping")
		}
	}
}

// peerStarting gives c the finding peer_down when, at one of times, one of servers (not
// entry) that served c's resource before its restart, or in its new process, was starting
// (Capabilities.Starting): the entries reach a restarted peer before it can answer, and it
// fails its first forwards as it would fail its own first requests.
func (k *DefaultClassifier) peerStarting(c *draft, entry string, servers []chain.ServerInfo, times []time.Time) bool {
	g := c.gvr()
	for _, at := range times {
		for _, srv := range servers {
			if srv.Name == entry {
				continue
			}
			// startLead: a new process answers a moment before its first loopback request
			// reaches its stream.
			since, starting := k.Caps.Starting(srv.Name, at.Add(startLead), StartingWindow)
			if !starting || at.Sub(since) >= peerStartingLimit {
				continue
			}
			if served, known := k.Caps.Serves(srv.Name, g, at); !known || !served {
				if served, known := k.Caps.Serves(srv.Name, g, since.Add(-time.Nanosecond)); !known || !served {
					continue
				}
			}
			c.Findings = append(c.Findings, chain.FindingPeerDown)
			when := startedWhen(since, at)
			c.Explanation += fmt.Sprintf("; %s, which serves %s, was starting (its new process's first request in its audit stream %s): restart noise (%s)",
				srv.Name, g, when, chain.FindingPeerDown)
			c.noiseOf, c.noiseSince = srv.Name, since
			return true
		}
	}
	return false
}

// startedWhen says when a new process's first request came relative to t: "1.2s before" or,
// within startLead, "18ms after".
func startedWhen(since, t time.Time) string {
	if since.After(t) {
		return since.Sub(t).Round(time.Millisecond).String() + " after"
	}
	return t.Sub(since).Round(time.Millisecond).String() + " before"
}

// peerStartingLimit bounds how long after a restarted peer's first loopback request its
// entries' failed forwards are put down to its start, even if it has served nobody yet:
// measured, a kube-apiserver is ready about 4 s after it starts and is proxied to within
// ~0.2 s of that; failures much later are a peer that does not come up, a real fault.
const peerStartingLimit = 2 * StartingWindow

// stoppingWindow is how long before an entry's stream falls silent its 5xx count as its
// stopping (entry_stopping).
const stoppingWindow = 2 * time.Second

// silent gives c a restart-noise finding f that blames server's silence from from to to
// (zero: it lasts).
func (k *DefaultClassifier) silent(c *draft, f chain.Finding, server string, from, to time.Time, what string) {
	c.Findings = append(c.Findings, f)
	until := "it is still silent"
	if !to.IsZero() {
		until = "until " + to.UTC().Format(time.RFC3339Nano)
	}
	c.Explanation += fmt.Sprintf("; %s %s: its audit stream is silent from %s, %s (restart noise, %s)",
		server, what, from.UTC().Format(time.RFC3339Nano), until, f)
	c.noiseOf, c.noiseSince = server, from
}

// peerDown gives c the finding peer_down, blaming peer's silence from from to to (zero: it
// lasts).
func (k *DefaultClassifier) peerDown(c *draft, peer string, from, to time.Time) {
	k.silent(c, chain.FindingPeerDown, peer, from, to, "which serves "+c.gvr().String()+", was down")
}
