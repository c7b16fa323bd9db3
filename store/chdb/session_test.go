package chdb_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store/chdb"
)

func session(t *testing.T, settings ...[2]string) *chdb.Session {
	t.Helper()
	s, err := engine(t).OpenSession(context.Background(), chdb.SessionOptions{Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestStreamMatchesExec: a streamed read returns what the same statement returns whole, in
// every shape of output (a document format, a row format, parameters).
func TestStreamMatchesExec(t *testing.T) {
	ctx := context.Background()
	s := session(t, [2]string{"readonly", "1"})
	for _, c := range []struct {
		sql, format string
		params      map[string]string
	}{
		{"SELECT number, toString(number) AS s FROM system.numbers LIMIT 200000", "TabSeparated", nil},
		{"SELECT number FROM system.numbers LIMIT 70000", "JSONCompactEachRow", nil},
		{"SELECT {a:UInt32} + number AS x FROM system.numbers LIMIT 3", "CSV", map[string]string{"a": "40"}},
		{"SELECT 1 WHERE 0", "TabSeparated", nil},
	} {
		whole, err := s.Exec(ctx, c.sql, c.format, c.params, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		streamed, err := s.Stream(ctx, c.sql, c.format, c.params, write(&out), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		streamed.Data = out.Bytes()
		if !bytes.Equal(whole.Data, streamed.Data) || streamed.RowsRead != whole.RowsRead {
			t.Errorf("%s: streamed %d bytes, %d rows; whole %d bytes, %d rows", c.sql, len(streamed.Data), streamed.RowsRead, len(whole.Data), whole.RowsRead)
		}
	}
}

func write(w io.Writer) func([]byte, uint64) error {
	return func(p []byte, _ uint64) error {
		_, err := w.Write(p)
		return err
	}
}

// limitWriter fails a Write past n bytes.
type limitWriter struct {
	n, got int
}

var errTooMuch = errors.New("too much")

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.got += len(p); l.got > l.n {
		return 0, errTooMuch
	}
	return len(p), nil
}

// TestStreamStopsWhenTheWriterFails: output the writer refuses stops the statement; the session
// answers the next statement with its own output only.
func TestStreamStopsWhenTheWriterFails(t *testing.T) {
	ctx := context.Background()
	s := session(t, [2]string{"readonly", "1"})
	// The engine's own result limit counts the block (8 bytes a row here), not the text.
	w := &limitWriter{n: 1 << 20}
	_, err := s.Stream(ctx, "SELECT number FROM system.numbers LIMIT 5000000", "JSONEachRow", nil, write(w), nil, 0)
	if !errors.Is(err, errTooMuch) {
		t.Fatalf("got %v, want the writer's error", err)
	}
	if w.got > 8<<20 {
		t.Errorf("the engine handed over %d bytes before it stopped", w.got)
	}
	var out bytes.Buffer
	if _, err := s.Stream(ctx, "SELECT 'next'", "TabSeparated", nil, write(&out), nil, 0); err != nil || out.String() != "next\n" {
		t.Fatalf("next statement: %v %q", err, out.String())
	}
	// An error part-way through leaves nothing behind either.
	if _, err := s.Stream(ctx, "SELECT throwIf(number = 300000) FROM system.numbers LIMIT 400000", "TabSeparated", nil, write(io.Discard), nil, 0); err == nil {
		t.Fatal("throwIf did not fail")
	}
	out.Reset()
	if _, err := s.Stream(ctx, "SELECT 'after error'", "TabSeparated", nil, write(&out), nil, 0); err != nil || out.String() != "after error\n" {
		t.Fatalf("after an error: %v %q", err, out.String())
	}
}

// TestStreamEndsEarly: io.EOF from each ends the statement as a success, and the session
// answers the next one cleanly.
func TestStreamEndsEarly(t *testing.T) {
	ctx := context.Background()
	s := session(t, [2]string{"readonly", "1"})
	chunks, rows := 0, uint64(0)
	r, err := s.Stream(ctx, "SELECT number FROM system.numbers LIMIT 1000000", "TabSeparated", nil, func(_ []byte, n uint64) error {
		chunks++
		rows += n
		return io.EOF
	}, nil, 0)
	if err != nil || chunks != 1 || rows == 0 || rows >= 1000000 || r.RowsRead != rows {
		t.Fatalf("err %v, %d chunks, %d rows (result %d)", err, chunks, rows, r.RowsRead)
	}
	var out bytes.Buffer
	if _, err := s.Stream(ctx, "SELECT 'next'", "TabSeparated", nil, write(&out), nil, 0); err != nil || out.String() != "next\n" {
		t.Fatalf("next statement: %v %q", err, out.String())
	}
}

// TestStreamCancelled: a cancelled stream returns ctx's error once onCancel has stopped it.
func TestStreamCancelled(t *testing.T) {
	s := session(t, [2]string{"readonly", "1"})
	kill, err := engine(t).OpenSession(context.Background(), chdb.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer kill.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	onCancel := func() {
		kill.Exec(context.Background(), "KILL QUERY WHERE query LIKE '%stream-cancel-marker%' ASYNC", "", nil, nil, 0)
	}
	_, err = s.Stream(ctx, "SELECT count() FROM system.numbers WHERE NOT ignore('stream-cancel-marker')", "TabSeparated", nil, write(io.Discard), onCancel, 10*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
}
