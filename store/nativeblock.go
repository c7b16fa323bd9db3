package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
)

// Rows for the embedded engine in ClickHouse's Native format: blocks of columns, the
// LowCardinality ones with their dictionaries built here. The engine parsed RowBinary events at
// about three times the CPU of the same rows as Native (BENCHMARKS.md, "the events and chains
// reach the engine as Native blocks"), most of it building those dictionaries value by value.
// ch-go's proto columns do the encoding, but for LowCardinality (lcStr); eventBlock and
// chainBlock only fill them in their tables' column order.

// A Native block is encoded once it holds nativeBlockRows rows or about nativeBlockBytes of
// strings, whichever comes first: the engine gathers an insert's blocks into one part whatever
// their size, so a block is only as large as keeps its memory small (about 1.5 MB at a
// kilobyte of raw JSON an event; events at the RequestResponse level can be megabytes each).
const (
	nativeBlockRows  = 1024
	nativeBlockBytes = 4 << 20
)

// nativeBlock is the columns of a block of rows and what encoding them needs. It is reused:
// encode empties it. Not safe for concurrent use; one stream at a time owns it.
type nativeBlock struct {
	table string
	input proto.Input
	// size is about how many bytes of strings the rows added hold (the rows' add counts them).
	size int
	out  proto.Buffer
	// Scratch for a row's map entries in key order (equal maps, equal bytes, as Insert writes them).
	extraKV []proto.KV[string, []string]
	strKV   []proto.KV[string, string]
}

// newNativeBlock is the block of cols, the columns of table in their order. A column whose type
// is not the table's is a mistake in this package, found by the first test that builds it.
func newNativeBlock(table string, columns []Column, cols []proto.Column) nativeBlock {
	if len(cols) != len(columns) {
		panic(fmt.Sprintf("store: %d Native columns for the %d of %s", len(cols), len(columns), table))
	}
	b := nativeBlock{table: table}
	for i, c := range cols {
		if got := string(c.Type()); got != columns[i].Type {
			panic(fmt.Sprintf("store: %s.%s is %s, its Native column %s", table, columns[i].Name, columns[i].Type, got))
		}
		b.input = append(b.input, proto.InputColumn{Name: columns[i].Name, Data: c})
	}
	return b
}

// ts is c as DateTime64(6, 'UTC').
func ts(c *proto.ColDateTime64) proto.Column {
	c.WithPrecision(proto.PrecisionMicro).WithLocation(time.UTC)
	return c
}

// rows is how many rows the block holds.
func (b *nativeBlock) rows() int { return b.input[0].Data.Rows() }

// full reports whether the block is to be encoded now.
func (b *nativeBlock) full() bool { return b.rows() >= nativeBlockRows || b.size >= nativeBlockBytes }

// encode appends the block in Native format to out and empties it; an empty block appends
// nothing.
func (b *nativeBlock) encode(out []byte) []byte {
	n := b.rows()
	if n == 0 {
		return out
	}
	b.out.Buf = out
	// Every column has n rows (a row appends one to each), the one error EncodeRawBlock
	// reports, and Prepare of these columns cannot fail.
	if err := (proto.Block{Columns: len(b.input), Rows: n}).EncodeRawBlock(&b.out, 0, b.input); err != nil {
		panic("store: encode a block of " + b.table + ": " + err.Error())
	}
	out = b.out.Buf
	b.out.Buf = nil
	b.reset()
	return out
}

// reset empties the block.
func (b *nativeBlock) reset() {
	b.input.Reset()
	b.size = 0
}

// dateTime64 is t as DateTime64(6): microseconds since 1970, the zero time 0 (as rbTime).
func dateTime64(t time.Time) proto.DateTime64 {
	if t.IsZero() {
		return 0
	}
	return proto.DateTime64(t.UnixNano() / 1000)
}

// appendExtra appends m, a Map(LowCardinality(String), Array(String)), its keys sorted.
func (b *nativeBlock) appendExtra(c *proto.ColMap[string, []string], m map[string][]string) {
	kv := b.extraKV[:0]
	for k, v := range m {
		kv = append(kv, proto.KV[string, []string]{Key: k, Value: v})
	}
	slices.SortFunc(kv, func(x, y proto.KV[string, []string]) int { return strings.Compare(x.Key, y.Key) })
	c.AppendKV(kv)
	clear(kv)
	b.extraKV = kv[:0]
}

// appendStringMap appends m, a Map(LowCardinality(String), String), its keys sorted.
func (b *nativeBlock) appendStringMap(c *proto.ColMap[string, string], m map[string]string) {
	kv := b.strKV[:0]
	for k, v := range m {
		kv = append(kv, proto.KV[string, string]{Key: k, Value: v})
	}
	slices.SortFunc(kv, func(x, y proto.KV[string, string]) int { return strings.Compare(x.Key, y.Key) })
	c.AppendKV(kv)
	clear(kv)
	b.strKV = kv[:0]
}

// blockStreamer is a Store that takes Native blocks from a reader (the embedded engine).
type blockStreamer interface {
	insertBlocks(ctx context.Context, table string, columns []Column, r io.Reader) error
}

// insertStream streams bs into table in one insert, encoding it in a buffer of w.rows.
func (w *Writer) insertStream(ctx context.Context, s blockStreamer, table string, columns []Column, bs *blockStream) error {
	buf, _ := w.rows.Get()
	bs.buf = buf[:0]
	err := s.insertBlocks(ctx, table, columns, bs)
	w.rows.Put(bs.buf[:0])
	return err
}

// insertBlocks streams r, Native blocks of columns, into table in one insert.
func (s *Embedded) insertBlocks(ctx context.Context, table string, columns []Column, r io.Reader) error {
	_, err := s.engine.Insert(ctx, insertStatement(table, columns), "Native", r)
	return embeddedError("insert", err)
}

// EncodeEventsNative encodes records as the writer sends them to the embedded engine: Native
// blocks of EventColumns. With InsertNative, it lets a benchmark or a ceiling time the
// engine's insert of what the writer sends, without the encoding.
func EncodeEventsNative(records []record.Record) ([]byte, error) {
	return io.ReadAll(eventStream(newEventBlock(), records))
}

// EncodeChainsNative encodes chains as the chain writer sends them: Native blocks of
// ChainColumns.
func EncodeChainsNative(chains []*chain.Chain) ([]byte, error) {
	return io.ReadAll(chainStream(newChainBlock(), chains))
}

// InsertNative inserts data, Native blocks of columns (EncodeEventsNative,
// EncodeChainsNative), into table in one insert.
func (s *Embedded) InsertNative(ctx context.Context, table string, columns []Column, data []byte) error {
	return s.insertBlocks(ctx, table, columns, bytes.NewReader(data))
}

// blockStream is an io.Reader of the rows of n units as Native blocks, encoded as it is read
// (the chains' and the events' streams): add adds the i-th unit's rows to block, which is
// encoded once it is full, and at the end. A unit may be several rows (a
// spool frame's) or none.
type blockStream struct {
	n     int
	add   func(i int)
	block blockEncoder
	next  int
	buf   []byte
	off   int
	// err, once add sets it, ends the stream with it.
	err error
}

// blockEncoder is the Native block a blockStream's rows are added to (nativeBlock).
type blockEncoder interface {
	full() bool
	encode(b []byte) []byte
}

func (r *blockStream) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.next == r.n {
			return 0, io.EOF
		}
		r.buf, r.off = r.buf[:0], 0
		for r.next < r.n && len(r.buf) == 0 && r.err == nil {
			r.add(r.next)
			r.next++
			if r.err == nil && (r.next == r.n || r.block.full()) {
				r.buf = r.block.encode(r.buf)
			}
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
func (r *blockStream) done() bool { return r.next == r.n && r.off == len(r.buf) }
