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

func TestFreeKeepsWhatKeepAccepts(t *testing.T) {
	f := NewFree(2, func(v *int) bool { return *v < 10 })
	one, big, two, three := 1, 99, 2, 3
	f.Put(&one)
	f.Put(&big) // refused by keep
	f.Put(&two)
	f.Put(&three) // over the count bound
	got := map[int]bool{}
	for range 2 {
		v, ok := f.Get()
		if !ok {
			t.Fatal("Free gave nothing while it held values")
		}
		got[*v] = true
	}
	if !got[1] || !got[2] {
		t.Fatalf("kept %v, want 1 and 2", got)
	}
	if v, ok := f.Get(); ok {
		t.Fatalf("drained Free gave %d", *v)
	}
}
