package store

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/ClickHouse/ch-go/proto"
)

// lcStr writes what ch-go's own LowCardinality column reads back, at each width of its keys,
// inside an array as at the top of a block, over blocks reused after Reset, and keeps its own
// copies of the values it was given.
func TestLCStrReadsBackAsLowCardinality(t *testing.T) {
	for _, distinct := range []int{1, 256, 257, 65536, 65537} {
		t.Run(fmt.Sprint(distinct), func(t *testing.T) {
			c := lc()
			arr := proto.NewArray[string](lc())
			for round := range 2 {
				var want []string
				// Every value is written over the one before in the same memory, as a frame
				// reader's records alias memory it reuses: the column must keep copies.
				scratch := make([]byte, 0, 32)
				for i := range distinct + 100 {
					scratch = fmt.Appendf(scratch[:0], "value-%d-%06d", round, i%distinct)
					c.Append(unsafeString(scratch))
					want = append(want, string(scratch))
				}
				arr.Append(want[:len(want)/2])
				arr.Append(nil)
				arr.Append(want[len(want)/2:])

				got := readBack(t, c, len(want))
				if !slices.Equal(got.Values, want) {
					t.Fatalf("round %d: read %d values back, want %d (first differing at %d)", round, len(got.Values), len(want), firstDiff(got.Values, want))
				}
				if c.Rows() != len(want) || c.Row(3) != want[3] {
					t.Fatalf("round %d: Rows %d Row(3) %q, want %d %q", round, c.Rows(), c.Row(3), len(want), want[3])
				}
				gotArr := proto.NewArray[string](new(proto.ColStr).LowCardinality())
				decode(t, arr, gotArr, 3)
				if r := gotArr.Row(0); !slices.Equal(r, want[:len(want)/2]) {
					t.Fatalf("round %d: the array's first row differs", round)
				}
				if r := gotArr.Row(1); len(r) != 0 {
					t.Fatalf("round %d: the empty row read %d values", round, len(r))
				}
				if r := gotArr.Row(2); !slices.Equal(r, want[len(want)/2:]) {
					t.Fatalf("round %d: the array's last row differs", round)
				}
				c.Reset()
				arr.Reset()
				if c.Rows() != 0 || len(c.index) != 0 || c.dict.Rows() != 0 {
					t.Fatalf("round %d: Reset left %d rows, %d values", round, c.Rows(), c.dict.Rows())
				}
			}
		})
	}
}

// An empty column writes nothing but its state, as ch-go's does.
func TestLCStrEmptyWritesNothing(t *testing.T) {
	var mine, theirs proto.Buffer
	lc().EncodeColumn(&mine)
	new(proto.ColStr).LowCardinality().EncodeColumn(&theirs)
	if len(mine.Buf) != 0 || len(theirs.Buf) != 0 {
		t.Fatalf("an empty column wrote %d bytes (ch-go's %d)", len(mine.Buf), len(theirs.Buf))
	}
	lc().EncodeState(&mine)
	new(proto.ColStr).LowCardinality().EncodeState(&theirs)
	if !bytes.Equal(mine.Buf, theirs.Buf) {
		t.Fatalf("state %x, ch-go's %x", mine.Buf, theirs.Buf)
	}
}

func readBack(t *testing.T, c *lcStr, rows int) *proto.ColLowCardinality[string] {
	t.Helper()
	got := new(proto.ColStr).LowCardinality()
	decode(t, c, got, rows)
	return got
}

// decode writes in's state and rows as a Native block does and reads them into out.
func decode(t *testing.T, in proto.ColInput, out proto.ColResult, rows int) {
	t.Helper()
	var b proto.Buffer
	in.(proto.StateEncoder).EncodeState(&b)
	in.EncodeColumn(&b)
	r := proto.NewReader(bytes.NewReader(b.Buf))
	if err := out.(proto.StateDecoder).DecodeState(r); err != nil {
		t.Fatalf("state: %v", err)
	}
	if err := out.DecodeColumn(r, rows); err != nil {
		t.Fatalf("column: %v", err)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// unsafeString is b as a string without a copy, as a frame reader's records alias its memory.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
