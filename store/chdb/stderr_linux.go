package chdb

import (
	"bytes"
	"io"
	"os"
	"syscall"
)

// withoutLoggingNotice runs fn with the process's stderr (file descriptor 2) read through a
// pipe, and passes on everything written there meanwhile except the engine's "Logging <level>
// to <file>" notice: the engine writes it to stderr, whatever its logger's settings, when
// its first connection sets up the log file. Whatever else is written meanwhile (by the engine
// or another goroutine) still reaches stderr, once fn returns.
func withoutLoggingNotice(fn func()) {
	r, w, err := os.Pipe()
	if err != nil {
		fn()
		return
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		r.Close()
		w.Close()
		fn()
		return
	}
	if err := syscall.Dup3(int(w.Fd()), 2, 0); err != nil {
		syscall.Close(saved)
		r.Close()
		w.Close()
		fn()
		return
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	fn()
	syscall.Dup3(saved, 2, 0)
	syscall.Close(saved)
	w.Close()
	b := <-got
	r.Close()
	var keep []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("Logging ")) && bytes.Contains(line, []byte(" to ")) {
			continue
		}
		keep = append(keep, line...)
	}
	if len(keep) > 0 {
		os.Stderr.Write(keep)
	}
}
