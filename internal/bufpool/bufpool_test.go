package bufpool

import "testing"

func TestPoolBounds(t *testing.T) {
	p := New(2, 1024)
	if b := p.Get(); b != nil {
		t.Fatalf("empty pool gave %d bytes", cap(b))
	}
	p.Put(make([]byte, 10, 100))
	p.Put(make([]byte, 0, 2048)) // over the capacity bound: dropped
	p.Put(make([]byte, 5, 200))
	p.Put(make([]byte, 0, 300)) // over the count bound: dropped
	got := map[int]bool{}
	for range 2 {
		b := p.Get()
		if len(b) != 0 {
			t.Fatalf("Get returned %d bytes of content, want an empty slice", len(b))
		}
		got[cap(b)] = true
	}
	if !got[100] || !got[200] {
		t.Fatalf("kept capacities %v, want 100 and 200", got)
	}
	if b := p.Get(); b != nil {
		t.Fatalf("drained pool gave %d bytes", cap(b))
	}
}

func TestNilPoolKeepsNothing(t *testing.T) {
	var p *Pool
	p.Put(make([]byte, 0, 10))
	if b := p.Get(); b != nil {
		t.Fatalf("nil pool gave %d bytes", cap(b))
	}
}
