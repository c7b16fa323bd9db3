package store

import (
	"bytes"
	"fmt"
	"math/big"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Values travel as ClickHouse's text form in Result (see Result.Rows): the embedded engine
// prints them itself (TabSeparatedWithNamesAndTypes), and for a server the Go values
// clickhouse-go decodes are printed the same way here, so callers see one representation.

// parseTSV parses TabSeparatedWithNamesAndTypes output.
func parseTSV(data []byte) (*Result, error) {
	r := &Result{}
	if len(data) == 0 {
		return r, nil
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if len(lines) < 2 {
		return nil, fmt.Errorf("result has %d header lines, want names and types", len(lines))
	}
	names, types := splitTSVLine(lines[0]), splitTSVLine(lines[1])
	if len(names) != len(types) {
		return nil, fmt.Errorf("result has %d names for %d types", len(names), len(types))
	}
	r.Columns = make([]Column, len(names))
	for i := range names {
		r.Columns[i] = Column{Name: names[i], Type: types[i]}
	}
	r.Rows = make([][]string, 0, len(lines)-2)
	for n, line := range lines[2:] {
		row := splitTSVLine(line)
		if len(row) != len(names) {
			return nil, fmt.Errorf("result row %d has %d values for %d columns", n, len(row), len(names))
		}
		r.Rows = append(r.Rows, row)
	}
	return r, nil
}

func splitTSVLine(line []byte) []string {
	fields := bytes.Split(line, []byte("\t"))
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = unescapeTSV(f)
	}
	return out
}

// unescapeTSV undoes TabSeparated escaping. A field that is exactly \N is NULL and stays
// Null.
func unescapeTSV(f []byte) string {
	if bytes.IndexByte(f, '\\') < 0 || string(f) == Null {
		return string(f)
	}
	var b strings.Builder
	b.Grow(len(f))
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '\\' || i+1 == len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		switch f[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case '0':
			b.WriteByte(0)
		case 'a':
			b.WriteByte('\a')
		case 'v':
			b.WriteByte('\v')
		default:
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// EscapeTSV escapes s for a TabSeparated field.
func EscapeTSV(s string) string {
	if !strings.ContainsAny(s, "\\\t\n\r\x00\b\f") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\0`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// QuoteString returns s as a ClickHouse string literal: 'it\'s'.
func QuoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			b.WriteString(`\'`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// formatValue prints a value decoded by clickhouse-go the way ClickHouse prints it in text
// formats; chType is the column's type, which fixes the precision of times.
func formatValue(v any, chType string) string {
	return string(appendValue(nil, reflect.ValueOf(v), unwrapType(chType), false))
}

// unwrapType strips LowCardinality and Nullable, which do not change how a value prints.
func unwrapType(t string) string {
	for {
		name, args := typeArgs(t)
		if (name == "LowCardinality" || name == "Nullable") && len(args) == 1 {
			t = args[0]
			continue
		}
		return t
	}
}

// elemTypes returns the element types of an Array(T) or Map(K, V) type ("" if unknown).
func elemTypes(t string) (string, string) {
	name, args := typeArgs(t)
	switch {
	case name == "Array" && len(args) == 1:
		return unwrapType(args[0]), ""
	case name == "Map" && len(args) == 2:
		return unwrapType(args[0]), unwrapType(args[1])
	}
	return "", ""
}

// appendValue appends v; nested says whether v sits inside an array or map, where strings
// are quoted.
func appendValue(b []byte, v reflect.Value, chType string, nested bool) []byte {
	if !v.IsValid() {
		if nested {
			return append(b, "NULL"...)
		}
		return append(b, Null...)
	}
	switch x := v.Interface().(type) {
	case time.Time:
		s := formatTime(x, chType)
		if nested {
			return append(b, QuoteString(s)...)
		}
		return append(b, s...)
	case big.Int:
		return append(b, x.String()...)
	case net.IP:
		return appendString(b, x.String(), nested)
	case fmt.Stringer:
		if v.Kind() != reflect.String && v.Kind() != reflect.Slice && v.Kind() != reflect.Map {
			return appendString(b, x.String(), nested)
		}
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			if nested {
				return append(b, "NULL"...)
			}
			return append(b, Null...)
		}
		return appendValue(b, v.Elem(), chType, nested)
	case reflect.String:
		return appendString(b, v.String(), nested)
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Float32:
		return strconv.AppendFloat(b, v.Float(), 'g', -1, 32)
	case reflect.Float64:
		return strconv.AppendFloat(b, v.Float(), 'g', -1, 64)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 && strings.HasPrefix(chType, "FixedString") {
			return appendString(b, string(v.Bytes()), nested)
		}
		elem, _ := elemTypes(chType)
		b = append(b, '[')
		for i := range v.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, v.Index(i), elem, true)
		}
		return append(b, ']')
	case reflect.Map:
		kt, vt := elemTypes(chType)
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, k, kt, true)
			b = append(b, ':')
			b = appendValue(b, v.MapIndex(k), vt, true)
		}
		return append(b, '}')
	}
	return appendString(b, fmt.Sprint(v.Interface()), nested)
}

func appendString(b []byte, s string, nested bool) []byte {
	if nested {
		return append(b, QuoteString(s)...)
	}
	return append(b, s...)
}

// formatTime prints t as ClickHouse prints a value of type chType (Date, Date32, DateTime,
// DateTime64(p)), in t's location (clickhouse-go sets the column's time zone).
func formatTime(t time.Time, chType string) string {
	name, args := typeArgs(chType)
	switch name {
	case "Date", "Date32":
		return t.Format(time.DateOnly)
	case "DateTime64":
		p := 3
		if len(args) > 0 {
			if n, err := strconv.Atoi(args[0]); err == nil {
				p = n
			}
		}
		if p == 0 {
			return t.Format(time.DateTime)
		}
		return t.Format(time.DateTime + "." + strings.Repeat("0", p))
	}
	return t.Format(time.DateTime)
}

// clickhouseTimeLayout is how ClickHouse prints DateTime64(6) and parses it back.
const clickhouseTimeLayout = "2006-01-02 15:04:05.000000"

// asStored is t as the tables' DateTime64(6) columns hold it: to the microsecond, where the
// receiver's clock gives nanoseconds. A time compared with one read back from a table must be
// compared as this.
func asStored(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// FormatTime returns t in the text form ClickHouse accepts for a DateTime64(6, 'UTC')
// parameter or literal.
func FormatTime(t time.Time) string {
	return t.UTC().Format(clickhouseTimeLayout)
}

// ParseTime parses a DateTime or DateTime64 value as ClickHouse prints it, in UTC.
func ParseTime(s string) (time.Time, error) {
	layout := time.DateTime
	if i := strings.IndexByte(s, '.'); i >= 0 {
		layout += "." + strings.Repeat("0", len(s)-i-1)
	}
	return time.ParseInLocation(layout, s, time.UTC)
}
