package sqlhttp

import (
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ErrResultTooLarge: a read's output, as it would be sent, grew past ReadLimits.MaxResultBytes.
var ErrResultTooLarge = errors.New("store: the result is larger than the SQL interface sends")

// The engine streams a read's output in chunks, each formatted on its own (chdb.Session.Stream):
// a header repeats in every chunk and a JSON document is whole in each. A result joins them into
// what the engine would have written for the whole statement, and counts the bytes as they will
// be sent.

// framing is how a format's chunks join.
type framing int

const (
	framed       framing = iota // chunks concatenate: rows, Native blocks
	headerLines                 // a header of escaped lines, repeated: keep the first chunk's
	headerCSV                   // a header of CSV records (a quoted name may hold a newline)
	headerBinary                // RowBinary's header: counts and length-prefixed names (and types)
	documentJSON                // one JSON document, built here from the compact rows
	tables                      // Pretty tables and Vertical records, a chunk each: a screenful
)

// formatSpec says how a client's format is produced: which format the engine streams, and how
// its chunks join.
type formatSpec struct {
	name    string // the format's canonical name
	engine  string // what the engine is asked for
	framing framing
	header  int  // header lines or records: 1 with names, 2 with names and types
	objects bool // documentJSON: rows as objects (JSON, JSONStrings) rather than arrays
}

// formatSpecs are the formats a read may ask for (AllowedFormats), by lower-case name.
var formatSpecs = func() map[string]formatSpec {
	m := map[string]formatSpec{}
	add := func(s formatSpec) {
		if s.engine == "" {
			s.engine = s.name
		}
		m[strings.ToLower(s.name)] = s
	}
	for _, n := range []string{"TabSeparated", "TabSeparatedRaw", "TSV", "TSVRaw", "CSV",
		"JSONEachRow", "JSONCompactEachRow", "JSONStringsEachRow", "JSONCompactStringsEachRow", "JSONLines", "NDJSON",
		"Native", "RowBinary", "Null"} {
		add(formatSpec{name: n})
	}
	for _, n := range []string{"Pretty", "PrettyCompact", "PrettySpace", "PrettyNoEscapes", "PrettyCompactNoEscapes",
		"PrettySpaceNoEscapes", "Vertical"} {
		add(formatSpec{name: n, framing: tables})
	}
	for _, p := range []string{"TabSeparated", "TSV", "JSONCompactEachRow", "JSONCompactStringsEachRow"} {
		add(formatSpec{name: p + "WithNames", framing: headerLines, header: 1})
		add(formatSpec{name: p + "WithNamesAndTypes", framing: headerLines, header: 2})
	}
	add(formatSpec{name: "CSVWithNames", framing: headerCSV, header: 1})
	add(formatSpec{name: "CSVWithNamesAndTypes", framing: headerCSV, header: 2})
	add(formatSpec{name: "RowBinaryWithNames", framing: headerBinary, header: 1})
	add(formatSpec{name: "RowBinaryWithNamesAndTypes", framing: headerBinary, header: 2})
	add(formatSpec{name: "JSON", engine: "JSONCompactEachRowWithNamesAndTypes", framing: documentJSON, objects: true})
	add(formatSpec{name: "JSONCompact", engine: "JSONCompactEachRowWithNamesAndTypes", framing: documentJSON})
	add(formatSpec{name: "JSONStrings", engine: "JSONCompactStringsEachRowWithNamesAndTypes", framing: documentJSON, objects: true})
	add(formatSpec{name: "JSONCompactStrings", engine: "JSONCompactStringsEachRowWithNamesAndTypes", framing: documentJSON})
	return m
}()

// prettyRows is how many rows the engine shows of a Pretty or Vertical result unless
// output_format_pretty_max_rows says otherwise (its default).
const prettyRows = 1000

// result collects a read's output (chdb.Session.Stream's each, through add).
type result struct {
	spec   formatSpec
	limit  int64
	screen uint64 // tables: the rows to show
	shown  uint64 // tables: rows the chunks so far held
	out    bytes.Buffer
	chunks int
	rows   int // documentJSON: rows written
	names  []string
	types  []json.RawMessage
}

// newResult collects output in spec's format, up to limit bytes; screen is how many rows a
// Pretty or Vertical result shows (0: prettyRows).
func newResult(spec formatSpec, limit int64, screen uint64) *result {
	if screen == 0 {
		screen = prettyRows
	}
	return &result{spec: spec, limit: limit, screen: screen}
}

// add is chdb.Session.Stream's each: it takes a chunk of rows rows.
func (r *result) add(chunk []byte, rows uint64) error {
	if _, err := r.Write(chunk); err != nil {
		return err
	}
	if r.spec.framing == tables {
		// The engine cuts each chunk's table at the screen's rows; stop once a screenful has
		// been shown, as the engine does for the whole result.
		if r.shown += rows; r.shown >= r.screen {
			return io.EOF
		}
	}
	return nil
}

// Write adds a chunk of output.
func (r *result) Write(chunk []byte) (int, error) {
	n := len(chunk)
	r.chunks++
	first := r.chunks == 1
	var err error
	switch r.spec.framing {
	case headerLines:
		if !first {
			chunk, err = cutLines(chunk, r.spec.header)
		}
	case headerCSV:
		if !first {
			chunk, err = cutCSV(chunk, r.spec.header)
		}
	case headerBinary:
		if !first {
			chunk, err = cutBinaryHeader(chunk, r.spec.header == 2)
		}
	case documentJSON:
		err = r.jsonRows(chunk, first)
		chunk = nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: join the engine's %s output: %w", r.spec.engine, err)
	}
	if int64(r.out.Len()+len(chunk)) > r.limit {
		return 0, fmt.Errorf("%w (%d bytes)", ErrResultTooLarge, r.limit)
	}
	r.out.Write(chunk)
	return n, nil
}

// cutLines drops the first n lines of chunk.
func cutLines(chunk []byte, n int) ([]byte, error) {
	for range n {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			return nil, errors.New("a chunk without its header")
		}
		chunk = chunk[i+1:]
	}
	return chunk, nil
}

// cutCSV drops the first n CSV records of chunk.
func cutCSV(chunk []byte, n int) ([]byte, error) {
	cr := csv.NewReader(bytes.NewReader(chunk))
	cr.FieldsPerRecord = -1
	for range n {
		if _, err := cr.Read(); err != nil {
			return nil, fmt.Errorf("a chunk's CSV header: %w", err)
		}
	}
	return chunk[cr.InputOffset():], nil
}

// cutBinaryHeader drops RowBinaryWithNames[AndTypes]'s header: the column count, then each
// name (and each type) as a length-prefixed string.
func cutBinaryHeader(chunk []byte, types bool) ([]byte, error) {
	cols, k := binary.Uvarint(chunk)
	if k <= 0 {
		return nil, errors.New("a chunk's RowBinary header")
	}
	chunk = chunk[k:]
	strs := cols
	if types {
		strs *= 2
	}
	for range strs {
		l, k := binary.Uvarint(chunk)
		if k <= 0 || uint64(len(chunk)-k) < l {
			return nil, errors.New("a chunk's RowBinary header")
		}
		chunk = chunk[k+int(l):]
	}
	return chunk, nil
}

// jsonRows adds a chunk of JSONCompact[Strings]EachRowWithNamesAndTypes (a line of names, a
// line of types, a row a line) to the document.
func (r *result) jsonRows(chunk []byte, first bool) error {
	// Line by line: a chunk can hold millions of rows, and the limit may stop it after a few.
	next := func() ([]byte, bool) {
		if len(chunk) == 0 {
			return nil, false
		}
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			i = len(chunk)
		}
		line := chunk[:i]
		chunk = chunk[min(i+1, len(chunk)):]
		return line, true
	}
	names, ok1 := next()
	types, ok2 := next()
	if !ok1 || !ok2 {
		return errors.New("a chunk without its header")
	}
	if first {
		if err := json.Unmarshal(names, &r.names); err != nil {
			return fmt.Errorf("column names: %w", err)
		}
		if err := json.Unmarshal(types, &r.types); err != nil || len(r.types) != len(r.names) {
			return fmt.Errorf("column types: %v", err)
		}
		r.startDocument()
	}
	var values []json.RawMessage
	for line, ok := next(); ok; line, ok = next() {
		if r.rows > 0 {
			r.out.WriteByte(',')
		}
		r.out.WriteString("\n\t\t")
		if !r.spec.objects {
			r.out.Write(line)
		} else {
			values = values[:0]
			if err := json.Unmarshal(line, &values); err != nil || len(values) != len(r.names) {
				return fmt.Errorf("a row: %v", err)
			}
			r.out.WriteByte('{')
			for i, v := range values {
				if i > 0 {
					r.out.WriteString(", ")
				}
				writeJSONString(&r.out, r.names[i])
				r.out.WriteString(": ")
				r.out.Write(v)
			}
			r.out.WriteByte('}')
		}
		r.rows++
		if int64(r.out.Len()) > r.limit {
			return fmt.Errorf("%w (%d bytes)", ErrResultTooLarge, r.limit)
		}
	}
	return nil
}

// startDocument writes a JSON document's meta, the names and types of its columns.
func (r *result) startDocument() {
	r.out.WriteString("{\n\t\"meta\":\n\t[")
	for i, name := range r.names {
		if i > 0 {
			r.out.WriteByte(',')
		}
		r.out.WriteString("\n\t\t{\n\t\t\t\"name\": ")
		writeJSONString(&r.out, name)
		r.out.WriteString(",\n\t\t\t\"type\": ")
		r.out.Write(r.types[i])
		r.out.WriteString("\n\t\t}")
	}
	r.out.WriteString("\n\t],\n\n\t\"data\":\n\t[")
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}

// bytes returns the whole output, given the statement's statistics. The engine sends no chunk
// for a read without rows in a format that frames nothing (TSV, Native: the answer is empty).
func (r *result) bytes(elapsed time.Duration, rowsRead, bytesRead uint64) []byte {
	if r.spec.framing == documentJSON {
		if r.chunks == 0 {
			r.startDocument()
		}
		fmt.Fprintf(&r.out, "\n\t],\n\n\t\"rows\": %d,\n\n\t\"statistics\":\n\t{\n\t\t\"elapsed\": %s,\n\t\t\"rows_read\": %d,\n\t\t\"bytes_read\": %d\n\t}\n}\n",
			r.rows, strconv.FormatFloat(elapsed.Seconds(), 'f', -1, 64), rowsRead, bytesRead)
	}
	return r.out.Bytes()
}
