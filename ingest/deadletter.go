package ingest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// ErrDeadLetterFull means the dead-letter files reached their size limit.
var ErrDeadLetterFull = errors.New("dead-letter files are full")

// DeadLetter is one rejected item or body, as written to the dead-letter file (one JSON object
// per line, one file per UTC day).
type DeadLetter struct {
	Time      time.Time `json:"time"`
	APIServer string    `json:"apiserver"`
	Remote    string    `json:"remote_addr,omitempty"`
	Reason    string    `json:"reason"`
	// Index is the item's position in its EventList, or -1 for a whole body.
	Index int `json:"index"`
	// Raw is the item or body when it is valid UTF-8; otherwise RawBase64 holds it.
	Raw       string `json:"raw,omitempty"`
	RawBase64 string `json:"raw_base64,omitempty"`
}

// DeadLetters appends dead letters to files under a directory. It is safe for concurrent use.
type DeadLetters struct {
	dir      string
	maxBytes int64
	sync     bool

	mu   sync.Mutex
	size int64
}

// OpenDeadLetters opens dir (creating it), counting what is already there against maxBytes.
// With sync, every write is fsynced before it returns, like acknowledged spool data.
func OpenDeadLetters(dir string, maxBytes int64, sync bool) (*DeadLetters, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	d := &DeadLetters{dir: dir, maxBytes: maxBytes, sync: sync}
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err == nil {
			d.size += info.Size()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	return d, nil
}

// NewDeadLetter builds a dead letter for raw, choosing its text or base64 form.
func NewDeadLetter(at time.Time, apiserver, remote, reason string, index int, raw []byte) DeadLetter {
	dl := DeadLetter{Time: at.UTC(), APIServer: apiserver, Remote: remote, Reason: reason, Index: index}
	if utf8.Valid(raw) {
		dl.Raw = string(raw)
	} else {
		dl.RawBase64 = base64.StdEncoding.EncodeToString(raw)
	}
	return dl
}

// Write appends letters to the current day's file.
func (d *DeadLetters) Write(letters ...DeadLetter) error {
	if len(letters) == 0 {
		return nil
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, l := range letters {
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("dead letters: encode: %w", err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.size+int64(b.Len()) > d.maxBytes {
		return fmt.Errorf("%w: %d of %d bytes used", ErrDeadLetterFull, d.size, d.maxBytes)
	}
	name := filepath.Join(d.dir, letters[0].Time.Format("2006-01-02")+".jsonl")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	n, err := f.WriteString(b.String())
	d.size += int64(n)
	if err == nil && d.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("dead letters: write %s: %w", name, err)
	}
	return nil
}
