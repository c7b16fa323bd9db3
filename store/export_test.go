package store

import (
	"context"
	"errors"
	"io"
	"sync"
)

// StreamFaults is the embedded store whose streamed inserts into the events table fail on
// demand, the two ways a stream can end: Aborted reads the whole stream and commits nothing;
// Lost commits it and then reports an error (the answer lost).
type StreamFaults struct {
	*Embedded
	mu      sync.Mutex
	Aborted int
	Lost    int
}

func (f *StreamFaults) insertBlocks(ctx context.Context, table string, columns []Column, r io.Reader) error {
	f.mu.Lock()
	aborted, lost := false, false
	if table == EventsTable {
		switch {
		case f.Aborted > 0:
			f.Aborted--
			aborted = true
		case f.Lost > 0:
			f.Lost--
			lost = true
		}
	}
	f.mu.Unlock()
	if aborted {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return err
		}
		return errors.New("insert aborted (simulated, nothing committed)")
	}
	if err := f.Embedded.insertBlocks(ctx, table, columns, r); err != nil || !lost {
		return err
	}
	return errors.New("read: connection reset by peer (simulated, after the insert committed)")
}

// HeldPayloadBytes is the bytes of frame payloads w holds for its next insert.
func (w *Writer) HeldPayloadBytes() int {
	n := len(w.payloads)
	for _, f := range w.frames {
		n += len(f.payload)
	}
	return n
}
