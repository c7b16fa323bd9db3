package sqlhttp_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store/sqlhttp"
)

// A read the engine cannot give back when it is killed (here a read of a pipe nobody writes,
// which the Policy would refuse: the pool is told to skip it) gives up its slot all the same:
// with one slot, the next read runs, and the pool closes at once.
func TestStuckReadGivesUpItsSlot(t *testing.T) {
	p, err := sqlhttp.NewReadPool(context.Background(), engine(t), sqlhttp.ReadLimits{MaxConcurrent: 1, MaxExecutionTime: time.Second, QueueTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sqlhttp.Unchecked(p)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	_, err = p.Run(context.Background(), sqlhttp.ReadQuery{Text: fmt.Sprintf("SELECT length(file('/proc/self/fd/%d'))", r.Fd())})
	if err == nil {
		t.Fatal("the read of an empty pipe returned")
	}
	t.Logf("the stuck read returned after %s: %v", time.Since(start), err)
	if n := p.Stuck(); n != 1 {
		t.Errorf("Stuck() = %d, want 1", n)
	}
	res, err := p.Run(context.Background(), sqlhttp.ReadQuery{Text: "SELECT 'next'"})
	if err != nil || string(res.Data) != "next\n" {
		t.Fatalf("the next read: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pool's Close waits for the stuck read")
	}
	// Let the engine have its read back: the stuck connection is closed then.
	w.Write([]byte("end"))
	w.Close()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stuck() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := p.Stuck(); n != 0 {
		t.Errorf("Stuck() = %d after the engine returned", n)
	}
}
