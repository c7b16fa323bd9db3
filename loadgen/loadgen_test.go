package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestQuantiles(t *testing.T) {
	var ls []time.Duration
	for i := 100; i >= 1; i-- {
		ls = append(ls, time.Duration(i)*time.Millisecond)
	}
	got := Quantiles(ls, 0.5, 0.9, 0.99, 1)
	want := []float64{51, 91, 100, 100}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("quantiles %v, want %v", got, want)
			break
		}
	}
	if z := Quantiles(nil, 0.5); len(z) != 1 || z[0] != 0 {
		t.Errorf("no latencies: %v", z)
	}
}

// A run posts valid EventLists of Batch events to each apiserver's path, with its token, and
// counts what was acknowledged; a receiver that refuses makes the run's Err name the loss.
func TestRunPostsAndCounts(t *testing.T) {
	var (
		mu     sync.Mutex
		posts  = map[string]int{}
		events = map[string]int{}
		tokens = map[string]string{}
		refuse bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil || list.Kind != "EventList" {
			http.Error(w, "not an EventList", http.StatusBadRequest)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/audit/")
		mu.Lock()
		posts[name]++
		events[name] += len(list.Items)
		tokens[name] = r.Header.Get("Authorization")
		no := refuse
		mu.Unlock()
		if no {
			http.Error(w, "full", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	o := Options{URL: srv.URL, APIServers: []string{"kas-a", "kas-b"}, Rate: 2000, Batch: 50, Duration: 200 * time.Millisecond,
		Client: srv.Client(), Token: func(a string) string { return "t-" + a }}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Batches == 0 || res.EventsSent != res.Batches*50 || res.EventsAcked != res.EventsSent || res.Codes["200"] != res.Batches || res.Err() != nil {
		t.Fatalf("result %+v", res)
	}
	if !(res.LatencyP50ms <= res.LatencyP90ms && res.LatencyP90ms <= res.LatencyP99ms && res.LatencyP99ms <= res.LatencyMaxms) {
		t.Errorf("quantiles out of order: %+v", res)
	}
	mu.Lock()
	for _, a := range o.APIServers {
		if posts[a] == 0 || events[a] != posts[a]*50 || tokens[a] != "Bearer t-"+a {
			t.Errorf("%s: %d posts, %d events, token %q", a, posts[a], events[a], tokens[a])
		}
	}
	if posts["kas-a"]+posts["kas-b"] != res.Batches {
		t.Errorf("the receiver saw %d batches, the result counts %d", posts["kas-a"]+posts["kas-b"], res.Batches)
	}
	refuse = true
	mu.Unlock()
	res, err = Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.EventsAcked != 0 || res.Codes["503"] != res.Batches || res.Err() == nil || !strings.Contains(res.Err().Error(), "not acknowledged") {
		t.Errorf("refused run: %+v, err %v", res, res.Err())
	}
}

// TestRunRetriesAsTheWebhookClientDoes: a 503 with Retry-After is posted again, as the
// apiserver's client does, up to maxRetries times; one without it is not.
func TestRunRetriesAsTheWebhookClientDoes(t *testing.T) {
	var mu sync.Mutex
	posts, mode := 0, "every other"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		posts++
		n, m := posts, mode
		mu.Unlock()
		switch {
		case m == "huge":
			w.Header().Set("Retry-After", "99999999999999")
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		case m == "always" || n%2 == 1:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	o := Options{URL: srv.URL, APIServers: []string{"kas-a"}, Rate: 0, Batch: 10, Batches: 20, Inflight: 1, Client: srv.Client()}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := posts
	mu.Unlock()
	if res.Err() != nil || res.EventsAcked != 200 || res.Codes["200"] != 20 || res.Retries != 20 || n != 40 {
		t.Errorf("every batch refused once: %+v after %d posts, err %v; want 20 batches acknowledged after 40 posts, 20 retries", res, n, res.Err())
	}

	mu.Lock()
	posts, mode = 0, "always"
	mu.Unlock()
	o.Batches = 2
	res, _ = Run(context.Background(), o)
	mu.Lock()
	n = posts
	mu.Unlock()
	if res.Err() == nil || res.Codes["503"] != 2 || res.Retries != 2*maxRetries || n != 2*(maxRetries+1) {
		t.Errorf("always refused: %+v after %d posts; want 2 batches refused after %d posts each", res, n, maxRetries+1)
	}

	// A wait beyond maxRetryAfter (here beyond a time.Duration) is not waited for.
	mu.Lock()
	posts, mode = 0, "huge"
	mu.Unlock()
	res, _ = Run(context.Background(), o)
	mu.Lock()
	n = posts
	mu.Unlock()
	if res.Err() == nil || res.Codes["503"] != 2 || res.Retries != 0 || n != 2 {
		t.Errorf("Retry-After beyond an hour: %+v after %d posts; want 2 batches refused after one post each", res, n)
	}
}
