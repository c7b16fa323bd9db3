package correlate

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// The apiservers' processes and versions: each new process or version begins a capability
// epoch and an entry of the version history, and evidence of one epoch says nothing of the next.

// maxHistory bounds the version history and the epochs kept per apiserver: an upgrade
// restarts each server a few times, not dozens.
const maxHistory = 32

// Sighting is what one of an apiserver's own loopback requests (or its configuration, with
// a zero At) tells about it.
type Sighting struct {
	// Version is the version its user agent names, already parsed with AgentVersion ("" when
	// unknown).
	Version string
	// Process is the UID of its loopback identity ("" when the record has none).
	Process string
	// Address is the IP it connected from ("" when unknown).
	Address string
	// At is when the request was received; zero for the configuration, which starts no epoch.
	At time.Time
}

// epochLocked returns the bounds of the version epoch of apiserver that holds t.
func (c *Capabilities) epochLocked(apiserver string, t time.Time) (from, to time.Time) {
	for _, e := range c.epochs[apiserver] {
		if e.After(t) {
			return from, e
		}
		from = e
	}
	return from, time.Time{}
}

// VersionAt returns the version apiserver ran at t: that of the entry of its version history
// that began last at or before t. Before the first entry it is the first entry's version when
// that entry is the first sighting (the process peertrail first saw ran before it was seen, as
// epochLocked counts it), "" when the first entry kept is a restart (older history was
// dropped). An apiserver with no history has its configured version, if any.
func (c *Capabilities) VersionAt(apiserver string, t time.Time) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.versionAtLocked(apiserver, t)
}

func (c *Capabilities) versionAtLocked(apiserver string, t time.Time) string {
	info := c.seen[apiserver]
	if info == nil {
		return ""
	}
	h := info.History
	if len(h) == 0 {
		return info.Version
	}
	i := sort.Search(len(h), func(i int) bool { return h[i].Since.After(t) }) // first entry after t
	if i > 0 {
		return h[i-1].Version
	}
	if h[0].Cause == chain.CauseFirstSeen {
		return h[0].Version
	}
	return ""
}

// LastSeen returns the version apiserver runs now, as far as its version history tells
// (VersionAt of its last sighting), and when peertrail last saw it; "" and the zero time
// for an apiserver never seen.
func (c *Capabilities) LastSeen(apiserver string) (version string, at time.Time) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	info := c.seen[apiserver]
	if info == nil || info.LastSeen.IsZero() {
		return "", time.Time{}
	}
	return c.versionAtLocked(apiserver, info.LastSeen), info.LastSeen
}

// NoteServing records that apiserver answered someone other than itself successfully at t:
// the process that ran at t was serving by then.
func (c *Capabilities) NoteServing(apiserver string, t time.Time) {
	if t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	from, _ := c.epochLocked(apiserver, t)
	m := c.ready[apiserver]
	if m == nil {
		m = map[int64]time.Time{}
		c.ready[apiserver] = m
	}
	k := int64(0)
	if !from.IsZero() {
		k = from.UnixNano()
	}
	if r, ok := m[k]; !ok || t.Before(r) {
		m[k] = t
		if len(m) > maxHistory+1 {
			oldest := int64(math.MaxInt64)
			for e := range m {
				oldest = min(oldest, e)
			}
			delete(m, oldest)
		}
	}
}

// Starting reports whether t lies in the start of the process of apiserver that ran at t:
// from its first loopback request (since) to window after it first served someone else
// successfully (or at any time before it did). Only a restart or a version change that
// peertrail saw counts: the first process peertrail saw may have run for long before.
func (c *Capabilities) Starting(apiserver string, t time.Time, window time.Duration) (since time.Time, starting bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	from, _ := c.epochLocked(apiserver, t)
	if from.IsZero() || t.Before(from) {
		return time.Time{}, false
	}
	ready, ok := c.ready[apiserver][from.UnixNano()]
	return from, !ok || t.Sub(ready) <= window
}

// StartedAt returns when the process of apiserver that ran at t started, as its audit
// stream showed (its first loopback request), if that process was a restart or a version
// change seen by peertrail: the first process peertrail saw may have run for long before.
func (c *Capabilities) StartedAt(apiserver string, t time.Time) (time.Time, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	from, _ := c.epochLocked(apiserver, t)
	return from, !from.IsZero()
}

// EpochCause returns why the process of apiserver that began at since began (CauseRestart,
// CauseVersionChange, CauseFirstSeen), or "" when the history does not hold it.
func (c *Capabilities) EpochCause(apiserver string, since time.Time) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if info := c.seen[apiserver]; info != nil {
		for _, e := range info.History {
			if e.Since.Equal(since) {
				return e.Cause
			}
		}
	}
	return ""
}

// NoteServer records that an apiserver was seen, with its version and address when known,
// at t (zero for its configuration). It is Note without a process identity.
func (c *Capabilities) NoteServer(apiserver, version, address string, t time.Time) {
	c.Note(apiserver, Sighting{Version: version, Address: address, At: t})
}

// Note records what one of apiserver's own loopback requests showed. A new process (another
// loopback UID than the current one) or another version than the current one, at a time not
// before the last sighting, begins a capability epoch and an entry of the version history:
// what the apiserver served before it is history. A process not yet known, seen from before
// the current one started (a stream late and out of order), begins a past epoch in its place
// (notePastLocked). Other older news (a late record of a previous process, or records
// replayed from the spool after peertrail restarted) changes nothing but the addresses and
// where a known process's epoch starts, and a record of a process already in the history
// starts nothing, so two processes that send under one name cannot make the view flap. A
// configured version (zero At) starts no epoch.
func (c *Capabilities) Note(apiserver string, s Sighting) {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.infoLocked(apiserver)
	if s.Address != "" && !slices.Contains(info.Addresses, s.Address) && len(info.Addresses) < 8 {
		info.Addresses = append(info.Addresses, s.Address)
		c.changes++
	}
	if s.At.IsZero() {
		if s.Address != "" {
			c.configured[apiserver] = true
		}
		c.setVersionLocked(info, s.Version)
		return
	}
	if s.Process != "" && s.Process == info.Process && c.moveStartLocked(apiserver, info, s.At) {
		return
	}
	if s.Process != "" && info.Process != "" && s.Process != info.Process && c.notePastLocked(apiserver, info, s) {
		return
	}
	if s.At.Before(info.LastSeen) || s.Process != "" && s.Process != info.Process && pastProcess(info.History, s.Process) {
		return
	}
	otherVersion := s.Version != "" && info.Version != "" && !chain.SameRelease(s.Version, info.Version)
	cause := ""
	switch {
	case otherVersion:
		cause = chain.CauseVersionChange
	case s.Process != "" && info.Process != "" && s.Process != info.Process:
		cause = chain.CauseRestart
	case len(info.History) == 0 && (s.Process != "" || s.Version != ""):
		cause = chain.CauseFirstSeen
	}
	if cause == chain.CauseRestart || cause == chain.CauseVersionChange {
		c.prevLast[apiserver] = info.LastSeen
		c.epochs[apiserver] = append(c.epochs[apiserver], s.At)
		if n := len(c.epochs[apiserver]); n > maxHistory {
			c.epochs[apiserver] = slices.Delete(c.epochs[apiserver], 0, n-maxHistory)
		}
	}
	c.setVersionLocked(info, s.Version)
	if s.Process != "" && s.Process != info.Process {
		info.Process = s.Process
		c.changes++
	}
	if cause != "" {
		v := s.Version
		if v == "" && cause == chain.CauseFirstSeen {
			v = info.Version // the configured one
		}
		info.History = append(info.History, chain.VersionEpoch{Since: s.At.UTC(), Version: v, Process: s.Process, Cause: cause})
		if n := len(info.History); n > maxHistory {
			info.History = slices.Delete(info.History, 0, n-maxHistory)
		}
		c.changes++
	}
	info.LastSeen = s.At
}

// moveStartLocked takes an earlier sighting of the current process as the start of its
// epoch. An apiserver's webhook sends its batches concurrently (the buffered backend's async
// delegate), so a later batch of a new process can arrive first: its epoch must then begin at
// the process's first request, not at the first one peertrail happened to read, or the
// requests in between are judged by what the previous process served (measured: 13 local
// requests of a server just restarted into 1.36 were reported broken that way). It never
// moves the start before the previous process's last sighting. It reports whether it moved.
func (c *Capabilities) moveStartLocked(apiserver string, info *chain.ServerInfo, at time.Time) bool {
	n := len(info.History)
	if n == 0 || info.History[n-1].Process != info.Process || !at.Before(info.History[n-1].Since) {
		return false
	}
	e := &info.History[n-1]
	if e.Cause != chain.CauseRestart && e.Cause != chain.CauseVersionChange {
		e.Since = at.UTC() // the first sighting: no epoch to move, only the history
		c.changes++
		return true
	}
	epochs := c.epochs[apiserver]
	if len(epochs) == 0 || !epochs[len(epochs)-1].Equal(e.Since) {
		return false
	}
	floor := time.Time{}
	if len(epochs) > 1 {
		floor = epochs[len(epochs)-2]
	}
	if last := c.prevLast[apiserver]; last.After(floor) {
		floor = last
	}
	if !at.After(floor) {
		return false
	}
	c.moveEpochLocked(apiserver, len(epochs)-1, at)
	e.Since = at.UTC()
	c.changes++
	return true
}

// notePastLocked takes a sighting of another process than the current one, from before the
// current one started: a stream that arrives late and out of order (a webhook backing off,
// batches sent concurrently) shows an apiserver's older processes after its newer ones. Such
// a process, not yet known, begins an epoch of its own in the past, between the processes
// known to run before and after it; a known one seen earlier than its epoch's start moves the
// start back (moveStartLocked's rule, for a past epoch). So evidence is attributed to the
// process that ran at its time whatever order the records came in. A known process seen
// where another one ran changes nothing (two processes sending under one name). It reports
// whether the sighting was taken as such, false when it is not from before the current
// process.
func (c *Capabilities) notePastLocked(apiserver string, info *chain.ServerInfo, s Sighting) bool {
	h := info.History
	n := len(h)
	if n == 0 || h[n-1].Process != info.Process || !s.At.Before(h[n-1].Since) {
		return false
	}
	// k is the first entry that began after the sighting.
	k := sort.Search(n, func(i int) bool { return h[i].Since.After(s.At) })
	if k > 0 && h[k-1].Process == s.Process {
		// Within its own epoch: the last sighting of the process before the current one
		// bounds how far back the current one's start may move.
		if k == n-1 && s.At.After(c.prevLast[apiserver]) {
			c.prevLast[apiserver] = s.At
		}
		return true
	}
	if i := slices.IndexFunc(h, func(e chain.VersionEpoch) bool { return e.Process == s.Process }); i >= 0 {
		if i == k {
			c.movePastStartLocked(apiserver, info, i, s.At)
		}
		return true
	}
	if k == 0 && n >= maxHistory {
		return true // older than the history kept
	}
	e := chain.VersionEpoch{Since: s.At.UTC(), Version: s.Version, Process: s.Process, Cause: chain.CauseFirstSeen}
	if k > 0 {
		e.Cause = causeAfter(h[k-1].Version, s.Version)
		c.insertEpochLocked(apiserver, s.At)
	}
	next := &h[k]
	if next.Cause != chain.CauseRestart && next.Cause != chain.CauseVersionChange {
		c.insertEpochLocked(apiserver, next.Since)
	}
	next.Cause = causeAfter(s.Version, next.Version)
	if k == n-1 && s.At.After(c.prevLast[apiserver]) {
		c.prevLast[apiserver] = s.At
	}
	info.History = slices.Insert(h, k, e)
	if n := len(info.History); n > maxHistory {
		info.History = slices.Delete(info.History, 0, n-maxHistory)
	}
	if n := len(c.epochs[apiserver]); n > maxHistory {
		c.epochs[apiserver] = slices.Delete(c.epochs[apiserver], 0, n-maxHistory)
	}
	c.changes++
	return true
}

// causeAfter is why a process running version began after one running prev: a version change
// when both are known and name other releases, else a restart.
func causeAfter(prev, version string) string {
	if prev != "" && version != "" && !chain.SameRelease(prev, version) {
		return chain.CauseVersionChange
	}
	return chain.CauseRestart
}

// movePastStartLocked takes at, earlier than its start, as the start of the past epoch of
// history entry i; never before the start of the entry before it.
func (c *Capabilities) movePastStartLocked(apiserver string, info *chain.ServerInfo, i int, at time.Time) {
	e := &info.History[i]
	if i > 0 && !at.After(info.History[i-1].Since) {
		return
	}
	if e.Cause == chain.CauseRestart || e.Cause == chain.CauseVersionChange {
		j := slices.IndexFunc(c.epochs[apiserver], func(t time.Time) bool { return t.Equal(e.Since) })
		if j < 0 {
			return
		}
		c.moveEpochLocked(apiserver, j, at)
	}
	e.Since = at.UTC()
	c.changes++
}

// insertEpochLocked begins an epoch of apiserver at t, in the past or not, unless one begins
// there already. When the process of the epoch that held t was first seen serving at t or
// after, that was the new epoch's process.
func (c *Capabilities) insertEpochLocked(apiserver string, t time.Time) {
	epochs := c.epochs[apiserver]
	i, found := slices.BinarySearchFunc(epochs, t, func(e, t time.Time) int { return e.Compare(t) })
	if found {
		return
	}
	from := int64(0)
	if i > 0 {
		from = epochs[i-1].UnixNano()
	}
	c.epochs[apiserver] = slices.Insert(epochs, i, t)
	if m := c.ready[apiserver]; m != nil {
		if r, ok := m[from]; ok && !r.Before(t) {
			delete(m, from)
			m[t.UnixNano()] = r
		}
	}
	c.changes++
}

// moveEpochLocked moves the start of apiserver's epoch j back to at (after the epoch before
// it), with when its process was first seen serving: a first answer the epoch before it held
// at or after at was the moved epoch's process's.
func (c *Capabilities) moveEpochLocked(apiserver string, j int, at time.Time) {
	epochs := c.epochs[apiserver]
	old := epochs[j].UnixNano()
	epochs[j] = at
	m := c.ready[apiserver]
	if m == nil {
		return
	}
	r, ok := m[old]
	delete(m, old)
	prev := int64(0)
	if j > 0 {
		prev = epochs[j-1].UnixNano()
	}
	if p, pok := m[prev]; pok && !p.Before(at) {
		delete(m, prev)
		if !ok || p.Before(r) {
			r, ok = p, true
		}
	}
	if ok {
		m[at.UnixNano()] = r
	}
}

// setVersionLocked takes version as the apiserver's current one, unless it names the same
// release as what is known with less detail (an agent's "v1.35.4" for a configured
// "v1.35.4-eks-4a1b2c3").
func (c *Capabilities) setVersionLocked(info *chain.ServerInfo, version string) {
	if version == "" || version == info.Version {
		return
	}
	if info.Version != "" && chain.SameRelease(version, info.Version) && len(version) <= len(info.Version) {
		return
	}
	info.Version = version
	c.changes++
}

// pastProcess reports whether process is one of history's processes.
func pastProcess(history []chain.VersionEpoch, process string) bool {
	for _, e := range history {
		if e.Process == process {
			return true
		}
	}
	return false
}

func (c *Capabilities) infoLocked(apiserver string) *chain.ServerInfo {
	info := c.seen[apiserver]
	if info == nil {
		info = &chain.ServerInfo{Name: apiserver}
		c.seen[apiserver] = info
	}
	return info
}

// Servers returns what is known of each apiserver, sorted by name.
func (c *Capabilities) Servers() []chain.ServerInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]chain.ServerInfo, 0, len(c.seen))
	for _, info := range c.seen {
		s := *info
		s.Addresses = slices.Clone(info.Addresses)
		s.History = slices.Clone(info.History)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
