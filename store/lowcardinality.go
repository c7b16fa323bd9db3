package store

import (
	"errors"
	"math"
	"strings"

	"github.com/ClickHouse/ch-go/proto"
)

// lcStr is a LowCardinality(String) column for Native blocks that builds its dictionary as rows
// are appended: a value is looked up once and, the first time the block sees it, copied once.
// ch-go's ColLowCardinality keeps every value it is given and builds the dictionary when the
// block is encoded, so the block first had to look each value up in a map of its own copies (a
// frame's records alias memory the next frame overwrites) and then the column looked it up
// again: two map lookups a value (BENCHMARKS.md, "A twenty-fifth session").
//
// It writes what ColLowCardinality writes (ClickHouse's key serialization version 1, then per
// block the dictionary as additional keys and the rows' keys in the narrowest width). Write
// only: a block never reads one back. Not safe for concurrent use; its block owns it.
type lcStr struct {
	// index is each value's key: its position in dict. Its keys are the column's own copies.
	index map[string]uint32
	dict  proto.ColStr
	keys  []uint32
}

// LowCardinality's serialization, as ClickHouse (and ch-go) define it: the stream's key
// serialization version, and the flags of a block's keys that say the dictionary comes with it.
const (
	lcSharedDictionariesWithAdditionalKeys = 1
	lcHasAdditionalKeys                    = 1 << 9
	lcNeedUpdateDictionary                 = 1 << 10
)

// maxKeptLCIndex bounds the index a column clears and keeps for the next block (clearing costs
// the map's capacity, not its length): one block of many distinct values does not stay.
const maxKeptLCIndex = 4096

// lc is an empty LowCardinality(String) column.
func lc() *lcStr { return &lcStr{index: map[string]uint32{}} }

// Append adds the row v.
func (c *lcStr) Append(v string) {
	k, ok := c.index[v]
	if !ok {
		k = uint32(c.dict.Rows())
		c.index[strings.Clone(v)] = k
		c.dict.Append(v)
	}
	c.keys = append(c.keys, k)
}

// AppendArr adds a row for each of vs.
func (c *lcStr) AppendArr(vs []string) {
	for _, v := range vs {
		c.Append(v)
	}
}

// Row is the value of row i.
func (c *lcStr) Row(i int) string { return c.dict.Row(int(c.keys[i])) }

// Rows is how many rows the column holds.
func (c *lcStr) Rows() int { return len(c.keys) }

// Type is LowCardinality(String).
func (c *lcStr) Type() proto.ColumnType {
	return proto.ColumnTypeLowCardinality.Sub(proto.ColumnTypeString)
}

// Reset empties the column for the next block.
func (c *lcStr) Reset() {
	if len(c.index) > maxKeptLCIndex {
		c.index = map[string]uint32{}
	} else {
		clear(c.index)
	}
	c.dict.Reset()
	c.keys = c.keys[:0]
}

// DecodeColumn is not supported: the column only writes.
func (c *lcStr) DecodeColumn(*proto.Reader, int) error {
	return errors.New("store: a LowCardinality column of a Native block is write-only")
}

// EncodeState writes the stream's prefix of the column: its key serialization version.
func (c *lcStr) EncodeState(b *proto.Buffer) { b.PutInt64(lcSharedDictionariesWithAdditionalKeys) }

// EncodeColumn writes the block's dictionary and its rows' keys; a column of no rows writes
// nothing (as ColLowCardinality, and as the array or map it is part of expects).
func (c *lcStr) EncodeColumn(b *proto.Buffer) {
	if len(c.keys) == 0 {
		return
	}
	n := c.dict.Rows()
	var width proto.CardinalityKey
	switch {
	case n <= math.MaxUint8+1:
		width = proto.KeyUInt8
	case n <= math.MaxUint16+1:
		width = proto.KeyUInt16
	default:
		width = proto.KeyUInt32
	}
	b.PutInt64(lcHasAdditionalKeys | lcNeedUpdateDictionary | int64(width))
	b.PutInt64(int64(n))
	c.dict.EncodeColumn(b)
	b.PutInt64(int64(len(c.keys)))
	switch width {
	case proto.KeyUInt8:
		for _, k := range c.keys {
			b.PutUInt8(uint8(k))
		}
	case proto.KeyUInt16:
		for _, k := range c.keys {
			b.PutUInt16(uint16(k))
		}
	default:
		for _, k := range c.keys {
			b.PutUInt32(k)
		}
	}
}

// WriteColumn writes the column as EncodeColumn does.
func (c *lcStr) WriteColumn(w *proto.Writer) { w.ChainBuffer(c.EncodeColumn) }
