package store_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/peertrail/peertrail/correlate"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/storetest"
)

// The capability history on the captures of real kube-apiservers: kas-b is replaced by
// v1.36.3 (rolling-upgrade-step), and what it served and forwarded changes with its version.
func TestCapabilityHistoryOfRealUpgrade(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	c, err := storetest.LoadCaptures(filepath.Join("..", storetest.RealDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := storetest.Write(ctx, s, c.Records, c.Chains); err != nil {
		t.Fatal(err)
	}
	from, to := c.Records[0].ReceivedAt, c.Records[0].ReceivedAt
	for _, r := range c.Records {
		from, to = minT(from, r.ReceivedAt), maxT(to, r.ReceivedAt)
	}
	history, err := store.CapabilityHistory(s)(ctx, from.Add(-time.Hour), to.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// kas-b's two epochs: v1.35.4 until its replacement, v1.36.3 after, each with what it did.
	var oldEnd, newStart time.Time
	did := map[string]map[string]bool{} // version -> "role group/resource"
	for _, r := range history {
		if r.Requests <= 0 || !r.From.Before(r.Until) {
			t.Errorf("record %+v: no requests or an empty span", r)
		}
		if r.APIServer == "kas-a" && r.Role == correlate.RoleServed && r.Resource == "podgroups" {
			t.Errorf("kas-a (1.35) served podgroups: %+v", r)
		}
		if r.APIServer != "kas-b" {
			continue
		}
		if did[r.Version] == nil {
			did[r.Version] = map[string]bool{}
		}
		did[r.Version][r.Role+" "+r.Group+"/"+r.Resource] = true
		switch r.Version {
		case "v1.35.4":
			oldEnd = maxT(oldEnd, r.Until)
		case "v1.36.3":
			if newStart.IsZero() || r.From.Before(newStart) {
				newStart = r.From
			}
		default:
			t.Errorf("kas-b record of version %q: %+v", r.Version, r)
		}
	}
	if oldEnd.IsZero() || newStart.IsZero() || oldEnd.After(newStart) {
		t.Fatalf("kas-b's epochs: v1.35.4 until %v, v1.36.3 from %v: want one after the other", oldEnd, newStart)
	}
	if !did["v1.35.4"]["forwarded scheduling.k8s.io/podgroups"] {
		t.Errorf("kas-b on v1.35.4 did not forward podgroups: %v", did["v1.35.4"])
	}
	onlyNew := 0
	for k := range did["v1.36.3"] {
		if !did["v1.35.4"][k] {
			onlyNew++
		}
	}
	if onlyNew == 0 {
		t.Errorf("kas-b on v1.36.3 did nothing v1.35.4 did not: %v", did["v1.36.3"])
	}

	// The API's ?at= picks each apiserver's epoch that holds the time.
	mux := http.NewServeMux()
	correlate.NewStoredAPI(nil, correlate.Stores{History: store.CapabilityHistory(s)}).Register(mux)
	api := httptest.NewServer(mux)
	defer api.Close()
	for _, tc := range []struct {
		at      time.Time
		version string
	}{{oldEnd.Add(-time.Second), "v1.35.4"}, {newStart.Add(time.Second), "v1.36.3"}} {
		resp, err := http.Get(api.URL + "/api/v1/apiservers?at=" + url.QueryEscape(tc.at.Format(time.RFC3339Nano)))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			History []correlate.CapabilityRecord `json:"history"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("?at=%s: %s %v", tc.at, resp.Status, err)
		}
		kasB := 0
		for _, r := range doc.History {
			if r.APIServer == "kas-b" {
				kasB++
				if r.Version != tc.version {
					t.Errorf("?at=%s: kas-b record of %s, want only %s", tc.at, r.Version, tc.version)
				}
			}
		}
		if kasB == 0 {
			t.Errorf("?at=%s: no record of kas-b", tc.at)
		}
	}
}

func minT(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
