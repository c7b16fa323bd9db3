package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The embedded engine takes bulk data as a byte stream in one of ClickHouse's input formats.
// RowBinary is cheap to produce from rows of values and to parse (no text escaping, no number
// formatting), so Insert encodes rows into it; the writer's events and chains, nearly all the
// data, go as Native blocks (nativeblock.go), which the engine reads for less. An encoder is
// compiled once per column type.

// valueEncoder appends one value in RowBinary.
type valueEncoder func(b []byte, v any) ([]byte, error)

// rowEncoder encodes whole rows for a fixed list of columns.
type rowEncoder struct {
	columns []Column
	enc     []valueEncoder
}

func newRowEncoder(columns []Column) (*rowEncoder, error) {
	e := &rowEncoder{columns: columns, enc: make([]valueEncoder, len(columns))}
	for i, c := range columns {
		enc, err := compileEncoder(c.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		e.enc[i] = enc
	}
	return e, nil
}

func (e *rowEncoder) appendRow(b []byte, row []any) ([]byte, error) {
	if len(row) != len(e.enc) {
		return b, fmt.Errorf("row has %d values for %d columns", len(row), len(e.enc))
	}
	var err error
	for i, v := range row {
		if b, err = e.enc[i](b, v); err != nil {
			return b, fmt.Errorf("column %s (%s): %w", e.columns[i].Name, e.columns[i].Type, err)
		}
	}
	return b, nil
}

// typeArgs splits "Name(a, b(c, d), 'e')" into "Name" and its top-level arguments.
func typeArgs(t string) (name string, args []string) {
	t = strings.TrimSpace(t)
	open := strings.IndexByte(t, '(')
	if open < 0 || !strings.HasSuffix(t, ")") {
		return t, nil
	}
	name, inner := t[:open], t[open+1:len(t)-1]
	depth, start := 0, 0
	inQuote := false
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; {
		case inQuote:
			if c == '\\' {
				i++
			} else if c == '\'' {
				inQuote = false
			}
		case c == '\'':
			inQuote = true
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			args = append(args, strings.TrimSpace(inner[start:i]))
			start = i + 1
		}
	}
	return name, append(args, strings.TrimSpace(inner[start:]))
}

func wrongType(v any, want string) error {
	return fmt.Errorf("got %T, want %s", v, want)
}

func compileEncoder(t string) (valueEncoder, error) {
	name, args := typeArgs(t)
	switch name {
	case "LowCardinality":
		// RowBinary carries LowCardinality(T) as T.
		if len(args) != 1 {
			return nil, fmt.Errorf("bad type %q", t)
		}
		return compileEncoder(args[0])
	case "String", "FixedString":
		return encodeString, nil
	case "Bool":
		return func(b []byte, v any) ([]byte, error) {
			x, ok := v.(bool)
			if !ok {
				return b, wrongType(v, "bool")
			}
			if x {
				return append(b, 1), nil
			}
			return append(b, 0), nil
		}, nil
	case "UInt8":
		return fixed(func(b []byte, x uint8) []byte { return append(b, x) }), nil
	case "UInt16":
		return fixed(binary.LittleEndian.AppendUint16), nil
	case "UInt32":
		return fixed(binary.LittleEndian.AppendUint32), nil
	case "UInt64":
		return fixed(binary.LittleEndian.AppendUint64), nil
	case "Int8":
		return fixed(func(b []byte, x int8) []byte { return append(b, byte(x)) }), nil
	case "Int16":
		return fixed(func(b []byte, x int16) []byte { return binary.LittleEndian.AppendUint16(b, uint16(x)) }), nil
	case "Int32":
		return fixed(func(b []byte, x int32) []byte { return binary.LittleEndian.AppendUint32(b, uint32(x)) }), nil
	case "Int64":
		return fixed(func(b []byte, x int64) []byte { return binary.LittleEndian.AppendUint64(b, uint64(x)) }), nil
	case "Float32":
		return fixed(func(b []byte, x float32) []byte { return binary.LittleEndian.AppendUint32(b, math.Float32bits(x)) }), nil
	case "Float64":
		return fixed(func(b []byte, x float64) []byte { return binary.LittleEndian.AppendUint64(b, math.Float64bits(x)) }), nil
	case "Date":
		return timeEncoder(func(b []byte, t time.Time) []byte {
			return binary.LittleEndian.AppendUint16(b, uint16(t.Unix()/86400))
		}), nil
	case "DateTime":
		return timeEncoder(func(b []byte, t time.Time) []byte {
			return binary.LittleEndian.AppendUint32(b, uint32(t.Unix()))
		}), nil
	case "DateTime64":
		if len(args) < 1 {
			return nil, fmt.Errorf("bad type %q", t)
		}
		p, err := strconv.Atoi(args[0])
		if err != nil || p < 0 || p > 9 {
			return nil, fmt.Errorf("bad precision in %q", t)
		}
		return timeEncoder(func(b []byte, t time.Time) []byte {
			// Ticks of 10^-p s. Zero time stays 0 (1970-01-01), the column default.
			var ticks int64
			if !t.IsZero() {
				ticks = t.UnixNano() / int64(math.Pow10(9-p))
			}
			return binary.LittleEndian.AppendUint64(b, uint64(ticks))
		}), nil
	case "Array":
		if len(args) != 1 {
			return nil, fmt.Errorf("bad type %q", t)
		}
		elem, err := compileEncoder(args[0])
		if err != nil {
			return nil, err
		}
		return arrayEncoder(elem), nil
	case "Map":
		if len(args) != 2 {
			return nil, fmt.Errorf("bad type %q", t)
		}
		return mapEncoder(args[1])
	}
	return nil, fmt.Errorf("type %q is not supported for insert", t)
}

func encodeString(b []byte, v any) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		return b, wrongType(v, "string")
	}
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...), nil
}

func fixed[T any](put func([]byte, T) []byte) valueEncoder {
	return func(b []byte, v any) ([]byte, error) {
		x, ok := v.(T)
		if !ok {
			var zero T
			return b, wrongType(v, fmt.Sprintf("%T", zero))
		}
		return put(b, x), nil
	}
}

func timeEncoder(put func([]byte, time.Time) []byte) valueEncoder {
	return func(b []byte, v any) ([]byte, error) {
		t, ok := v.(time.Time)
		if !ok {
			return b, wrongType(v, "time.Time")
		}
		return put(b, t), nil
	}
}

func arrayEncoder(elem valueEncoder) valueEncoder {
	return func(b []byte, v any) ([]byte, error) {
		var err error
		switch x := v.(type) {
		case []string:
			b = binary.AppendUvarint(b, uint64(len(x)))
			for _, s := range x {
				if b, err = elem(b, s); err != nil {
					return b, err
				}
			}
		case []int32:
			b = binary.AppendUvarint(b, uint64(len(x)))
			for _, n := range x {
				if b, err = elem(b, n); err != nil {
					return b, err
				}
			}
		case []any:
			b = binary.AppendUvarint(b, uint64(len(x)))
			for _, e := range x {
				if b, err = elem(b, e); err != nil {
					return b, err
				}
			}
		default:
			return b, wrongType(v, "[]string, []int32 or []any")
		}
		return b, nil
	}
}

// mapEncoder handles the map shapes peertrail stores, keys always strings. Keys are written in
// sorted order so that equal maps encode to equal bytes (ClickHouse keeps the order given).
func mapEncoder(valueType string) (valueEncoder, error) {
	val, err := compileEncoder(valueType)
	if err != nil {
		return nil, err
	}
	return func(b []byte, v any) ([]byte, error) {
		switch m := v.(type) {
		case map[string]string:
			return appendMap(b, m, val)
		case map[string][]string:
			return appendMap(b, m, val)
		case map[string]uint64:
			return appendMap(b, m, val)
		}
		return b, wrongType(v, "map[string]string, map[string][]string or map[string]uint64")
	}, nil
}

func appendMap[V any](b []byte, m map[string]V, val valueEncoder) ([]byte, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	var err error
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		if b, err = val(b, m[k]); err != nil {
			return b, err
		}
	}
	return b, nil
}
