package correlate

import (
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/metrics"
)

// What the records teach of the apiservers themselves: their processes, versions and
// addresses (from their own loopback requests), and the stretches of time their streams cover.

// noteServer learns an apiserver's version, process and address from its own loopback
// requests (isLoopback), whatever its binary is called: the version from the user agent
// (AgentVersion), the process from the loopback identity's UID, which a real apiserver makes
// up afresh at every start (measured: in test/testdata/real/peer-stopped, kas-c restarted into
// the same v1.36.3 and its loopback UID went from 63b0c382-... to 423d4b6a-...). Every stage
// counts, at the time the request was received: a new process's first requests are its
// informers' initial watches, before it serves anyone, and a policy may omit any stage but
// ResponseComplete. A user agent without a version that parses is counted and logged, once
// per apiserver and agent, never silently skipped.
func (co *Correlator) noteServer(r *record.Record) {
	if !isLoopback(r) {
		return
	}
	at := r.RequestReceivedTimestamp
	if at.IsZero() {
		at = r.StageTimestamp
	}
	v, err := chain.AgentVersion(r.UserAgent)
	if err != nil {
		co.reportAgent(r, err)
	}
	addr := ""
	if len(r.SourceIPs) > 0 {
		addr = r.SourceIPs[0]
	}
	co.caps.Note(r.APIServer, Sighting{Version: v, Process: r.UserUID, Address: addr, At: at})
}

// noteActivity records the stretch of time a frame's records cover in their apiserver's
// stream (a frame is one webhook batch, from one apiserver), by the records' own times: the
// gaps between such stretches are when the apiserver was down (peer_down). It also notes the
// earliest successful answer to anyone but the apiserver itself, overall and since its
// current process started: when a restarted process began to serve (entry_starting).
func (co *Correlator) noteActivity(recs []record.Record) {
	var from, to, served, servedNow time.Time
	var current, written, last time.Time
	name := ""
	flush := func() {
		if name == "" {
			return
		}
		co.caps.NoteDelivered(name, written, last)
		// Late is judged by when the records were written: a long request's (a watch's)
		// record is received as it ends, its RequestReceived minutes old in a stream on time.
		if !written.IsZero() && written.UnixNano() < co.j.now-co.opts.Window.Nanoseconds() {
			co.lateActivity = true
		}
		co.caps.NoteActivity(name, from, to)
		co.caps.NoteServing(name, served)
		if !servedNow.IsZero() && !servedNow.Equal(served) {
			co.caps.NoteServing(name, servedNow)
		}
	}
	for i := range recs {
		r := &recs[i]
		if r.APIServer != name {
			flush()
			from, to, served, servedNow, written, last = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
			name = r.APIServer
			current, _ = co.caps.StartedAt(name, r.StageTimestamp)
		}
		if at := r.StageTimestamp; !at.IsZero() && (written.IsZero() || at.Before(written)) {
			written = at
		}
		if r.StageTimestamp.After(last) {
			last = r.StageTimestamp
		}
		for _, at := range []time.Time{r.RequestReceivedTimestamp, r.StageTimestamp} {
			if at.IsZero() {
				continue
			}
			if from.IsZero() || at.Before(from) {
				from = at
			}
			if at.After(to) {
				to = at
			}
		}
		if r.Code >= 200 && r.Code < 300 && r.UserName != userAPIServer && !r.RequestReceivedTimestamp.IsZero() {
			at := r.RequestReceivedTimestamp
			if served.IsZero() || at.Before(served) {
				served = at
			}
			if !at.Before(current) && (servedNow.IsZero() || at.Before(servedNow)) {
				servedNow = at
			}
		}
	}
	flush()
}

// maxReportedAgents bounds the (apiserver, user agent) pairs logged as unparseable; past it
// they are only counted.
const maxReportedAgents = 64

// reportAgent counts a loopback request whose user agent gave no version (once per request:
// at its final stage) and logs each apiserver's such agent the first time.
func (co *Correlator) reportAgent(r *record.Record, err error) {
	if r.Stage == "RequestReceived" || r.Stage == "ResponseStarted" {
		return
	}
	co.versionErrors.WithLabelValues(r.APIServer).Inc()
	key := r.APIServer + "\x00" + r.UserAgent
	if _, done := co.reportedAgents[key]; done || len(co.reportedAgents) > maxReportedAgents {
		return
	}
	co.reportedAgents[key] = struct{}{}
	msg := "correlate: an apiserver's own request names no version peertrail can parse; its version and the skew check do not follow it (its restarts still do, by its loopback UID)"
	if len(co.reportedAgents) > maxReportedAgents {
		msg += " (further such user agents are only counted in " + metrics.APIServerVersionUnparseableTotal + ")"
	}
	co.log.Warn(msg, "apiserver", r.APIServer, "user_agent", r.UserAgent, "uid", r.UserUID, "err", err)
}

// groupMasters is the group of the apiserver's loopback identity; peer discovery, which is
// also audited as system:apiserver, carries only system:authenticated.
const groupMasters = "system:masters"

// isLoopback reports whether r is one of the apiserver's own loopback requests: user
// system:apiserver in group system:masters, sent from one address (a request forwarded by a
// peer adds the peer's address to sourceIPs).
//
// What the apiserver itself is, not what its binary is called: every kube-apiserver (and
// every build that embeds one, such as k3s) authenticates its loopback client with a token
// it makes up at start, as user system:apiserver, groups [system:authenticated,
// system:masters] and a UID that is a fresh random UUID per process
// (k8s.io/apiserver/pkg/server/config.go, AuthorizeClientBearerToken). The real captures in
// test/testdata/real show exactly that, while the peer-discovery fetches of a server's
// /api and /apis come as system:apiserver with groups [system:authenticated] only, no UID
// and no user agent.
func isLoopback(r *record.Record) bool {
	if r.UserName != userAPIServer || len(r.SourceIPs) > 1 {
		return false
	}
	for _, g := range r.UserGroups {
		if g == groupMasters {
			return true
		}
	}
	return false
}
