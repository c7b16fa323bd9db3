// Package loadgen posts synthetic audit EventLists to a receiver on a fixed schedule and
// measures what it acknowledged and how fast: `peertrail loadgen` is its command line.
//
// The schedule is open loop: one sender per apiserver posts a batch every interval
// (Batch*len(APIServers)/Rate), staggered so the senders' batches do not arrive together, and
// a slow receiver does not slow it (a batch due while others wait is sent anyway, and counted
// late when it left more than an interval behind). Only batches due after Warmup are measured.
//
// With Rate 0 there is no schedule: each sender keeps Inflight batches in flight, as fast as
// the receiver acknowledges them (closed loop), which measures the receiver's ceiling.
package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peertrail/peertrail/internal/bufpool"
	"github.com/peertrail/peertrail/simulate"
)

// Options describe one run.
type Options struct {
	// URL is the receiver's base URL; batches go to URL/audit/<apiserver>.
	URL string
	// URLOf, when set, is each apiserver's receiver instead of URL (the HA layout: each
	// apiserver posts to the agent on its node).
	URLOf func(apiserver string) string
	// APIServers are the names to send as, one sender each.
	APIServers []string
	// Rate is events per second over all apiservers (0: as fast as possible, Inflight
	// batches per sender); Batch events per EventList.
	Rate, Batch int
	// Warmup is sent at the same rate first, unmeasured; Duration is measured.
	Warmup, Duration time.Duration
	// Client posts the batches (its TLS and timeout are the caller's).
	Client *http.Client
	// Token returns the bearer token to send as apiserver ("" for none); may be nil.
	Token func(apiserver string) string
	// Bodies makes sender i's batches (nil: simulate's events, every auditID fresh). Every body
	// it renders must hold exactly Batch events: the counts are Batch per batch.
	Bodies func(sender int) (Body, error)
	// Batches, when positive, is how many batches each sender sends, warm-up included, and ends
	// the run instead of Duration: senders whose batches hold both sides of forwarded requests
	// must all send the same number, or some requests lose a side.
	Batches int
	// Inflight is how many batches a sender keeps in flight when Rate is 0 (default 2).
	Inflight int
	// Live, when set, counts batches as they are sent and answered, for a progress line.
	Live *Live
}

// Body renders the EventList of one batch into dst's memory (its content is dropped).
// simulate.Template is one.
type Body interface {
	AppendRender(dst []byte, sender, seq int) []byte
}

// Live counts events while a run goes on (warm-up included).
type Live struct {
	Sent, Acked, Refused atomic.Int64
	// Retried counts the posts made again after a 429 or 5xx with Retry-After.
	Retried atomic.Int64
}

// Result is what a run measured (the batches due after the warm-up).
type Result struct {
	Batches      int            `json:"batches"`
	EventsSent   int            `json:"events_sent"`
	EventsAcked  int            `json:"events_acked"`
	Codes        map[string]int `json:"codes"`
	Seconds      float64        `json:"seconds"`
	AckedPerSec  float64        `json:"acked_events_per_second"`
	LatencyP50ms float64        `json:"ack_latency_p50_ms"`
	LatencyP90ms float64        `json:"ack_latency_p90_ms"`
	LatencyP99ms float64        `json:"ack_latency_p99_ms"`
	LatencyMaxms float64        `json:"ack_latency_max_ms"`
	Late         int            `json:"batches_sent_late"`
	// Retries counts the posts made again, after a 429 or 5xx that carried Retry-After (as
	// the apiserver's webhook client does, up to maxRetries a batch); Codes counts each
	// batch's last answer, and its latency runs from its first post to that answer.
	Retries int `json:"retries,omitempty"`
	// WarmupRefused counts the events of warm-up batches that were not acknowledged.
	WarmupRefused int `json:"warmup_refused,omitempty"`
}

// Err is the run's failure, if any: events of the warm-up or of the measurement that were not
// acknowledged.
func (r Result) Err() error {
	if r.WarmupRefused > 0 {
		return fmt.Errorf("%d events sent during the warm-up were not acknowledged", r.WarmupRefused)
	}
	if r.EventsAcked < r.EventsSent {
		return fmt.Errorf("%d of %d events were not acknowledged", r.EventsSent-r.EventsAcked, r.EventsSent)
	}
	return nil
}

// Run sends on the schedule until Warmup+Duration has passed (or ctx ends) and returns what it
// measured; an error means it could not start.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Rate < 0 || o.Batch <= 0 || len(o.APIServers) == 0 {
		return Result{}, fmt.Errorf("loadgen: batch and apiservers must be positive, rate not negative")
	}
	if o.Rate == 0 && o.Batches <= 0 && o.Duration <= 0 {
		return Result{}, fmt.Errorf("loadgen: as fast as possible (rate 0) needs a number of batches or a duration")
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	token := o.Token
	if token == nil {
		token = func(string) string { return "" }
	}
	base := o.URLOf
	if base == nil {
		base = func(string) string { return o.URL }
	}
	n := len(o.APIServers)
	var interval time.Duration // 0: as fast as possible
	if o.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(o.Batch*n) / float64(o.Rate))
	}
	inflightMax := o.Inflight
	if inflightMax <= 0 {
		inflightMax = 2
	}
	live := o.Live
	if live == nil {
		live = &Live{}
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		res       = Result{Codes: map[string]int{}}
	)
	start := time.Now()
	measureFrom := start.Add(o.Warmup)
	deadline := measureFrom.Add(o.Duration)
	// Bodies are rendered into reused buffers: a fresh third of a megabyte per batch made this
	// process's garbage collector part of the latency it measures.
	bodies := bufpool.New(64, 8<<20)
	templates := make([]Body, n)
	for si := range o.APIServers {
		var (
			tmpl Body
			err  error
		)
		if o.Bodies != nil {
			tmpl, err = o.Bodies(si)
		} else {
			tmpl, err = simulate.NewTemplate(simulate.NewEvents(uint64(si+1), nil), o.Batch)
		}
		if err != nil {
			return Result{}, err
		}
		templates[si] = tmpl
	}
	var wg sync.WaitGroup
	for si, name := range o.APIServers {
		tmpl := templates[si]
		wg.Go(func() {
			var inflight sync.WaitGroup
			defer inflight.Wait()
			// As fast as possible: a token per batch in flight.
			turns := make(chan struct{}, inflightMax)
			// Stagger senders so their batches do not all arrive at once.
			next := start.Add(interval * time.Duration(si) / time.Duration(n))
			for seq := 0; ; seq++ {
				if o.Batches > 0 && seq >= o.Batches || o.Batches <= 0 && !next.Before(deadline) {
					break
				}
				if interval == 0 {
					select {
					case turns <- struct{}{}:
					case <-ctx.Done():
						return
					}
					next = time.Now()
				} else if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				late := interval > 0 && time.Since(next) > interval
				measured := !next.Before(measureFrom)
				body := tmpl.AppendRender(bodies.Get(), si, seq)
				live.Sent.Add(int64(o.Batch))
				inflight.Go(func() {
					t0 := time.Now()
					code, retries := send(ctx, o.Client, base(name)+"/audit/"+name, token(name), body, live)
					lat := time.Since(t0)
					if interval == 0 {
						<-turns
					}
					if code == "200" { // read to the end by the server, so the transport is done with it
						bodies.Put(body)
						live.Acked.Add(int64(o.Batch))
					} else {
						live.Refused.Add(int64(o.Batch))
					}
					mu.Lock()
					defer mu.Unlock()
					if !measured {
						if code != "200" {
							res.WarmupRefused += o.Batch
						}
						return
					}
					res.Batches++
					res.Retries += retries
					res.EventsSent += o.Batch
					res.Codes[code]++
					if code == "200" {
						res.EventsAcked += o.Batch
						latencies = append(latencies, lat)
					}
					if late {
						res.Late++
					}
				})
				next = next.Add(interval)
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(measureFrom).Seconds()
	if res.Seconds > 0 {
		res.AckedPerSec = float64(res.EventsAcked) / res.Seconds
	}
	q := Quantiles(latencies, 0.5, 0.9, 0.99, 1)
	res.LatencyP50ms, res.LatencyP90ms, res.LatencyP99ms, res.LatencyMaxms = q[0], q[1], q[2], q[3]
	return res, nil
}

// Quantiles returns, in milliseconds, the qs (0..1; 1 is the maximum) of latencies by the
// nearest-rank method: the smallest latency at or above the share q of them. It sorts
// latencies; none gives zeros.
func Quantiles(latencies []time.Duration, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(latencies) == 0 {
		return out
	}
	slices.Sort(latencies)
	for i, q := range qs {
		d := latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]
		out[i] = float64(d.Microseconds()) / 1000
	}
	return out
}

// maxRetries is how many times a batch is posted again after an answer that asks for it: the
// apiserver's webhook client (client-go) retries a 429 or 5xx that carries Retry-After up to 10
// times within one attempt, waiting as long as it says.
const maxRetries = 10

// maxRetryAfter bounds the wait a server may ask for, in seconds: beyond it (or beyond what a
// time.Duration holds) the answer stands as a refusal.
const maxRetryAfter = 3600

// send posts body until it is answered without a request to retry, or maxRetries times
// again, and returns the last answer and the retries.
func send(ctx context.Context, c *http.Client, url, token string, body []byte, live *Live) (string, int) {
	for retries := 0; ; retries++ {
		code, wait, again := post(ctx, c, url, token, body)
		if !again || retries == maxRetries {
			return code, retries
		}
		live.Retried.Add(1)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return code, retries
		}
	}
}

// post posts body once and returns the status code (or "error"), and whether, and after how
// long, the server asked for it again (a 429 or 5xx with Retry-After in seconds).
func post(ctx context.Context, c *http.Client, url, token string, body []byte) (string, time.Duration, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "error", 0, false
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "error", 0, false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	code := fmt.Sprint(resp.StatusCode)
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return code, 0, false
	}
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || secs < 0 || secs > maxRetryAfter {
		return code, 0, false
	}
	return code, time.Duration(secs) * time.Second, true
}
