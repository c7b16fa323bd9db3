package spool

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// crashFrame is frame id's payload: its id, then filler of a length that varies with it.
func crashFrame(id int) []byte {
	return fmt.Appendf(nil, "%d:%s", id, strings.Repeat("x", (id*131)%3000))
}

// TestKill9KeepsEveryAcknowledgedFrame appends from a child process with small segments, so
// that it moves on to segments made ahead of use many times, kills it with SIGKILL at a random
// moment, reopens the spool and checks that every frame acknowledged (Wait returned) that its
// consumer had not committed is there, whole and once. Then it does it again, appending on to
// the recovered spool.
func TestKill9KeepsEveryAcknowledgedFrame(t *testing.T) {
	if dir := os.Getenv("SPOOL_CRASH_CHILD"); dir != "" {
		crashChild(t, dir)
		return
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	acked := map[int]Position{} // frame id -> end
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKill9KeepsEveryAcknowledgedFrame$")
		cmd.Env = append(os.Environ(), "SPOOL_CRASH_CHILD="+dir, "SPOOL_CRASH_FIRST="+strconv.Itoa(round*1_000_000))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 200 + rng.IntN(800) // acknowledged frames
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			var id int
			var end Position
			if _, err := fmt.Sscanf(sc.Text(), "%d %d", &id, &end); err != nil {
				continue
			}
			acked[id] = end
			if n++; n == killAfter {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		cmd.Wait()
		if n < killAfter {
			t.Fatalf("round %d: the child acknowledged %d frames and stopped before the kill", round, n)
		}

		s := open(t, dir, func(o *Options) { o.SegmentBytes = 32 << 10; o.MaxBytes = 1 << 30; o.Consumers = []string{"a"} })
		from, err := s.Committed("a")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, e := range readAll(t, s, from) {
			id, err := strconv.Atoi(string(e.Payload[:strings.IndexByte(string(e.Payload), ':')]))
			if err != nil || string(e.Payload) != string(crashFrame(id)) {
				t.Fatalf("round %d: frame at %d is not what was written: %q", round, e.Pos, e.Payload[:min(len(e.Payload), 40)])
			}
			if seen[id] {
				t.Fatalf("round %d: frame %d read twice", round, id)
			}
			seen[id] = true
			if end, ok := acked[id]; ok && end != e.End {
				t.Fatalf("round %d: frame %d ends at %d, its append said %d", round, id, e.End, end)
			}
		}
		missing := 0
		for id, end := range acked {
			if end > from && !seen[id] {
				missing++
			}
		}
		st := s.Stats()
		s.Close()
		if missing > 0 {
			t.Fatalf("round %d: %d acknowledged frames after the committed position %d are missing", round, missing, from)
		}
		if st.CorruptFrames != 0 {
			t.Fatalf("round %d: %d frames counted corrupt", round, st.CorruptFrames)
		}
		t.Logf("round %d: killed after %d acknowledged frames; %d frames from %d on, %d segments", round, n, len(seen), from, st.Segments)
	}
}

// crashChild appends frames from four goroutines until it is killed, printing each frame's id
// and end once Wait has returned for it, while a consumer commits positions behind them so
// that segments are deleted too.
func crashChild(t *testing.T, dir string) {
	first, _ := strconv.Atoi(os.Getenv("SPOOL_CRASH_FIRST"))
	s, err := Open(Options{Dir: dir, SegmentBytes: 32 << 10, MaxBytes: 1 << 30, Consumers: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		from, _ := s.Committed("a")
		r := s.NewReader(from)
		// Commit 300 frames behind what was read, so that a round leaves frames to check.
		var ends []Position
		for {
			e, err := r.Next(context.Background())
			if err != nil {
				return
			}
			if ends = append(ends, e.End); len(ends) == 350 {
				s.Commit("a", ends[49])
				ends = append(ends[:0], ends[50:]...)
			}
		}
	}()
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := first + g; ; i += 4 {
				end, err := s.Append(crashFrame(i))
				if err == nil {
					err = s.Wait(context.Background(), end)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "child:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(w, "%d %d\n", i, end)
				w.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
