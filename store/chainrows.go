package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/peertrail/peertrail/correlate"
)

// Chain rows straight to RowBinary. ChainRow's []any rows box every value (about fifty
// allocations and 3 KiB a chain, measured in BenchmarkChainWriter) and a batch's rows all lived
// until its insert returned: in a burst the chains waiting for the store were the largest part
// of the heap (BENCHMARKS.md, "The whole process"). appendChainRow writes the same bytes as
// EncodeRowBinary(ChainColumns, [][]any{ChainRow(c)}) (TestChainRowBinaryMatchesChainRow keeps
// them equal) with no allocation, and chainStream encodes the rows as the engine reads them, so
// a batch costs its chains and a few hundred KiB, whatever its size.

// rowBinaryStreamer is a Store that takes RowBinary from a reader (the embedded engine).
type rowBinaryStreamer interface {
	insertRowBinaryStream(ctx context.Context, table string, columns []Column, r io.Reader) error
}

// insertStream streams rs into table in one insert, encoding it in a buffer of w.rows.
func (w *Writer) insertStream(ctx context.Context, s rowBinaryStreamer, table string, columns []Column, rs *rowStream) error {
	buf, _ := w.rows.Get()
	rs.buf = buf[:0]
	err := s.insertRowBinaryStream(ctx, table, columns, rs)
	w.rows.Put(rs.buf[:0])
	return err
}

// insertRowBinaryStream streams r, RowBinary for columns, into table in one insert.
func (s *Embedded) insertRowBinaryStream(ctx context.Context, table string, columns []Column, r io.Reader) error {
	_, err := s.engine.Insert(ctx, insertStatement(table, columns), "RowBinary", r)
	return embeddedError("insert", err)
}

// rowStream is an io.Reader of n RowBinary rows, row appending the i-th, encoded a chunk at a
// time as it is read (the chains' and the events' streams). A unit that row appends may be
// several rows (a spool frame's) or none.
type rowStream struct {
	n    int
	row  func(b []byte, i int) []byte
	next int
	buf  []byte
	off  int
	// err, once row sets it, ends the stream with it.
	err error
}

func (r *rowStream) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.next == r.n {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for r.next < r.n && len(r.buf) < rowReaderChunk && r.err == nil {
			r.buf = r.row(r.buf, r.next)
			r.next++
		}
		if r.err != nil {
			return 0, r.err
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// done reports whether every row was read.
func (r *rowStream) done() bool { return r.next == r.n && r.off == len(r.buf) }

// chainStream streams the rows of chains.
func chainStream(chains []*correlate.Chain) *rowStream {
	return &rowStream{n: len(chains), row: func(b []byte, i int) []byte { return appendChainRow(b, chains[i]) }}
}

// appendChainRow appends c's row of the chains table in RowBinary, the columns of ChainColumns
// in their order (see ChainRow for what each holds).
func appendChainRow(b []byte, c *correlate.Chain) []byte {
	b = rbString(b, c.ID)
	b = rbString(b, c.AuditID)
	b = binary.LittleEndian.AppendUint64(b, ChainVersion(c))
	b = binary.LittleEndian.AppendUint32(b, uint32(max(c.Revision, 0)))
	b = rbBool(b, c.Evicted)
	b = rbString(b, string(c.State))
	b = rbString(b, string(c.Class))
	b = binary.AppendUvarint(b, uint64(len(c.Findings)))
	for _, f := range c.Findings {
		b = rbString(b, string(f))
	}
	b = rbString(b, c.Explanation)
	b = rbString(b, c.Verb)
	b = rbString(b, c.RequestURI)
	b = rbString(b, c.Group)
	b = rbString(b, c.Version)
	b = rbString(b, c.Resource)
	b = rbString(b, c.Subresource)
	b = rbString(b, c.Namespace)
	b = rbString(b, c.Name)
	b = rbString(b, c.User)
	b = rbString(b, c.RealUser)
	b = binary.LittleEndian.AppendUint32(b, uint32(c.Code))
	b = appendSideRow(b, c.Entry)
	b = appendSideRow(b, c.Peer)
	n := 0
	for _, o := range c.Others {
		if o != nil {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, o := range c.Others {
		if o != nil {
			b = rbString(b, o.APIServer)
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, o := range c.Others {
		if o != nil {
			b = binary.LittleEndian.AppendUint32(b, uint32(o.Code))
		}
	}
	b = rbString(b, otherSides(c)) // loops only: rare, so its JSON may allocate
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.EntryDurationSeconds))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.PeerDurationSeconds))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.ForwardingOverheadSeconds))
	b = rbTime(b, RequestTime(c))
	b = rbTime(b, c.FirstReceived)
	b = rbTime(b, c.LastReceived)
	return binary.LittleEndian.AppendUint32(b, uint32(max(c.Records, 0)))
}

// appendSideRow appends the has_<side> flag and the side's columns (sideColumns); a missing
// side is its zero values.
func appendSideRow(b []byte, s *correlate.Side) []byte {
	if s == nil {
		s = &correlate.Side{} // does not escape: no allocation
		b = rbBool(b, false)
	} else {
		b = rbBool(b, true)
	}
	b = rbString(b, s.APIServer)
	b = binary.LittleEndian.AppendUint32(b, uint32(s.Code))
	b = rbString(b, s.User)
	b = rbString(b, s.UID)
	b = rbStrings(b, s.Groups)
	b = rbExtra(b, s.Extra)
	b = rbString(b, s.ImpersonatedUser)
	b = rbStrings(b, s.ImpersonatedGroups)
	b = rbExtra(b, s.ImpersonatedExtra)
	b = rbStrings(b, s.SourceIPs)
	b = rbString(b, s.UserAgent)
	b = rbString(b, s.Message)
	b = rbString(b, s.Reason)
	b = rbTime(b, s.RequestReceived)
	b = rbTime(b, s.Completed)
	b = rbStrings(b, s.Stages)
	b = rbBool(b, s.HasObjects)
	return rbString(b, s.APIServerVersion)
}

func rbString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func rbBool(b []byte, x bool) []byte {
	if x {
		return append(b, 1)
	}
	return append(b, 0)
}

func rbStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = rbString(b, s)
	}
	return b
}

// rbTime is DateTime64(6): microseconds since 1970, as the generic encoder computes them (the
// zero time is 0, the column default).
func rbTime(b []byte, t time.Time) []byte {
	var ticks int64
	if !t.IsZero() {
		ticks = t.UnixNano() / 1000
	}
	return binary.LittleEndian.AppendUint64(b, uint64(ticks))
}

// rbExtra is a Map(String, Array(String)) with its keys sorted, as mapEncoder writes it, so
// that equal maps are equal bytes. Extras are rare and small; sorting them allocates.
func rbExtra(b []byte, m map[string][]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	if len(m) == 0 {
		return b
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = rbString(b, k)
		b = rbStrings(b, m[k])
	}
	return b
}

// insertChains writes the rows of chains (retraction rows included): into the embedded engine
// in one insert, streamed as RowBinary; into another store as ChainRow rows through
// Store.Insert, in chunks that bound the memory of the boxed rows (a retraction row and the row
// that supersedes it stay in one chunk, one insert, as the rollups expect). On an error, any
// part of it may have landed.
func (w *Writer) insertChains(ctx context.Context, chains []*correlate.Chain) error {
	if s, ok := w.store.(rowBinaryStreamer); ok {
		return w.insertStream(ctx, s, ChainsTable, ChainColumns, chainStream(chains))
	}
	for len(chains) > 0 {
		n := min(len(chains), chainInsertChunk)
		for n < len(chains) && chains[n-1].State == StateRetracted {
			n++ // keep the superseding row with its retraction
		}
		rows := make([][]any, n)
		for i, c := range chains[:n] {
			rows[i] = ChainRow(c)
		}
		if err := w.store.Insert(ctx, ChainsTable, ChainColumns, rows); err != nil {
			return fmt.Errorf("%d of %d rows: %w", n, len(chains), err)
		}
		chains = chains[n:]
	}
	return nil
}

// chainInsertChunk is how many chain rows one Store.Insert takes when they go as []any rows
// (a server store): about 3 KiB each while they wait.
const chainInsertChunk = 10_000
