package correlate

import "github.com/peertrail/peertrail/ingest/spool"

// The chains in memory in the order of their first record's spool position: how far the spool
// may commit (SafePosition) is read from the oldest without a scan.

// posInsert puts c among the chains in position order: at the tail of the posHead list when it is at least
// as young as the tail (always, for a new chain), else into back.
func (j *Joiner) posInsert(c *chainState) {
	if j.posTail != 0 && j.at(j.posTail).firstPos > c.firstPos {
		j.back = append(j.back, c.self)
		c.backAt = int32(len(j.back))
		j.backUp(len(j.back) - 1)
		return
	}
	c.pprev, c.pnext = j.posTail, 0
	if j.posTail != 0 {
		j.at(j.posTail).pnext = c.self
	} else {
		j.posHead = c.self
	}
	j.posTail = c.self
}

func (j *Joiner) posRemove(c *chainState) {
	if c.backAt != 0 {
		i, last := int(c.backAt-1), len(j.back)-1
		c.backAt = 0
		if i != last {
			j.back[i] = j.back[last]
			j.at(j.back[i]).backAt = int32(i + 1)
		}
		j.back[last] = 0
		j.back = j.back[:last]
		if i != last {
			j.backDown(i)
			j.backUp(i)
		}
		return
	}
	if c.pprev != 0 {
		j.at(c.pprev).pnext = c.pnext
	} else {
		j.posHead = c.pnext
	}
	if c.pnext != 0 {
		j.at(c.pnext).pprev = c.pprev
	} else {
		j.posTail = c.pprev
	}
	c.pprev, c.pnext = 0, 0
}

func (j *Joiner) backLess(a, b int) bool {
	return j.at(j.back[a]).firstPos < j.at(j.back[b]).firstPos
}

func (j *Joiner) backSwap(a, b int) {
	j.back[a], j.back[b] = j.back[b], j.back[a]
	j.at(j.back[a]).backAt = int32(a + 1)
	j.at(j.back[b]).backAt = int32(b + 1)
}

func (j *Joiner) backUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !j.backLess(i, p) {
			return
		}
		j.backSwap(i, p)
		i = p
	}
}

func (j *Joiner) backDown(i int) {
	for n := len(j.back); ; {
		l, m := 2*i+1, i
		if l < n && j.backLess(l, m) {
			m = l
		}
		if r := l + 1; r < n && j.backLess(r, m) {
			m = r
		}
		if m == i {
			return
		}
		j.backSwap(i, m)
		i = m
	}
}

// SafePosition is the spool position before which no chain in memory has a record: after a
// restart, replaying from it rebuilds every open chain, and every final one a late record could
// still reopen (within the late window). A final chain's records must not be passed while it can
// be reopened: a late record joined after a restart to a chain the replay did not rebuild would
// make a chain of its own, with another verdict (and the store would keep both). Kept chains
// (the watch journal holds their records; watchlog.go) do not hold it back: a watch runs for
// hours. ok is false when no chain is in memory.
func (j *Joiner) SafePosition() (pos spool.Position, ok bool) {
	for r := j.posHead; r != 0; {
		c := j.at(r)
		if !j.passable(c) {
			pos, ok = c.firstPos, true
			break
		}
		r = c.pnext
	}
	if len(j.back) == 0 {
		return pos, ok
	}
	if c := j.at(j.back[0]); !j.passable(c) {
		if !ok || c.firstPos < pos {
			return c.firstPos, true
		}
		return pos, ok
	}
	// The oldest chain opened again is a kept one (rare): look at them all.
	for _, r := range j.back {
		if c := j.at(r); !j.passable(c) && (!ok || c.firstPos < pos) {
			pos, ok = c.firstPos, true
		}
	}
	return pos, ok
}

// passable reports whether the spool may pass c's records while it is in memory: it is kept,
// or there is no journal and it is a running watch (whose completion is then joined alone
// after a restart).
func (j *Joiner) passable(c *chainState) bool {
	if j.journaled {
		return c.kept
	}
	return j.watching(c)
}
