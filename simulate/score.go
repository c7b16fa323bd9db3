package simulate

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/peertrail/peertrail/internal/tlsconfig"
)

// ClientTLS is the TLS configuration that reaches the receiver described by o.
func ClientTLS(o WebhookOptions) (*tls.Config, error) {
	return tlsconfig.Client(o.CAFile, o.InsecureSkipVerify, "", "")
}

// Scorecard compares what peertrail concluded with the truth.
type Scorecard struct {
	Requests int `json:"requests"`
	// Matched requests got the right class and findings.
	Matched int `json:"matched"`
	// Confusion counts truth class -> peertrail's class.
	Confusion map[string]map[string]int `json:"confusion"`
	// FindingsWrong counts requests with the right class but other findings.
	FindingsWrong int `json:"findings_wrong"`
	// Missing requests had no final chain in peertrail.
	Missing int `json:"missing"`
	// Faults counts, per injected fault, how many requests it shaped and how many of those
	// peertrail classified right.
	Faults map[string][2]int `json:"faults"`
	// Mismatches lists a few wrong ones for a human to look at.
	Mismatches []string `json:"mismatches,omitempty"`
}

// Accuracy is the share of requests classified right.
func (s Scorecard) Accuracy() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Matched) / float64(s.Requests)
}

// Percent is the share of requests classified right, with two decimals cut, never rounded:
// a miss never prints as 100% (5062 of 5063 is 99.98%), and only a perfect score prints as
// "100%".
func (s Scorecard) Percent() string {
	if s.Requests == 0 {
		return "-"
	}
	if s.Matched == s.Requests {
		return "100%"
	}
	// Integer arithmetic: no float rounding can turn 99.999... into 100.
	cut := int64(s.Matched) * 10000 / int64(s.Requests)
	return fmt.Sprintf("%d.%02d%%", cut/100, cut%100)
}

type apiChain struct {
	State       string   `json:"state"`
	Class       string   `json:"class"`
	Findings    []string `json:"findings"`
	Explanation string   `json:"explanation"`
}

// Score asks a running peertrail (its chain API at base) about every request of truths,
// waiting up to wait for chains to become final, and compares.
func Score(ctx context.Context, client *http.Client, base string, truths []Truth, wait time.Duration) (Scorecard, error) {
	sc := Scorecard{Confusion: map[string]map[string]int{}, Faults: map[string][2]int{}}
	deadline := time.Now().Add(wait)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var firstErr error
	for _, t := range truths {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := finalChain(ctx, client, base, t.AuditID, deadline)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			sc.Requests++
			got := "missing"
			if c != nil {
				got = c.Class
			} else {
				sc.Missing++
			}
			if sc.Confusion[t.Class] == nil {
				sc.Confusion[t.Class] = map[string]int{}
			}
			sc.Confusion[t.Class][got]++
			ok := c != nil && c.Class == t.Class && sameStrings(c.Findings, t.Findings)
			if ok {
				sc.Matched++
			} else if c != nil && c.Class == t.Class {
				sc.FindingsWrong++
			}
			if !ok && len(sc.Mismatches) < 10 {
				var f []string
				why := ""
				if c != nil {
					f, why = c.Findings, c.Explanation
				}
				sc.Mismatches = append(sc.Mismatches, fmt.Sprintf("%s %s %s at %s: truth %s %v, peertrail %s %v (%s)", t.AuditID, t.Verb, t.Resource,
					t.At.UTC().Format("15:04:05.000"), t.Class, t.Findings, got, f, why))
			}
			for _, fault := range t.Faults {
				v := sc.Faults[fault]
				v[0]++
				if ok {
					v[1]++
				}
				sc.Faults[fault] = v
			}
		})
	}
	wg.Wait()
	return sc, firstErr
}

func sameStrings(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func finalChain(ctx context.Context, client *http.Client, base, id string, deadline time.Time) (*apiChain, error) {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/chains/"+id, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("ask peertrail for chain %s: %w", id, err)
		}
		var c apiChain
		code := resp.StatusCode
		if code == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&c)
		}
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("decode chain %s: %w", id, err)
		}
		if code == http.StatusOK && c.State == "final" {
			return &c, nil
		}
		if code != http.StatusOK && code != http.StatusNotFound {
			return nil, fmt.Errorf("chain %s: status %d", id, code)
		}
		if time.Now().After(deadline) {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Summary renders the truth as counts per class and per fault.
func Summary(truths []Truth) string {
	classes := map[string]int{}
	faults := map[string]int{}
	for _, t := range truths {
		classes[t.Class]++
		for _, f := range t.Faults {
			faults[f]++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests:", len(truths))
	for _, k := range slices.Sorted(maps.Keys(classes)) {
		fmt.Fprintf(&b, " %s %d", k, classes[k])
	}
	if len(faults) > 0 {
		b.WriteString("; injected faults:")
		for _, k := range slices.Sorted(maps.Keys(faults)) {
			fmt.Fprintf(&b, " %s %d", k, faults[k])
		}
	}
	return b.String()
}
