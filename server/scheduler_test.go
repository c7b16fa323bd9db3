package server

import (
	"os"
	"runtime"
	"testing"
)

func TestWidenScheduler(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)

	t.Setenv("GOMAXPROCS", "3")
	if n, set := WidenScheduler(); set || n != before || runtime.GOMAXPROCS(0) != before {
		t.Fatalf("with $GOMAXPROCS set: %d (set %v), GOMAXPROCS now %d, want %d untouched", n, set, runtime.GOMAXPROCS(0), before)
	}
	os.Unsetenv("GOMAXPROCS") // restored by t.Setenv's cleanup
	if n, set := WidenScheduler(); !set || n != 2*before || runtime.GOMAXPROCS(0) != 2*before {
		t.Fatalf("without $GOMAXPROCS: %d (set %v), GOMAXPROCS now %d, want %d", n, set, runtime.GOMAXPROCS(0), 2*before)
	}
}
