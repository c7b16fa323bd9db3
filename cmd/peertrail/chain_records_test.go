package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// peertrail chain --records asks /api/v1/chains/{auditID}/records and prints the chain, then
// each audit event behind it under the apiserver and stage that sent it, as the apiserver wrote
// it; -o json gives the API's answer whole.
func TestChainRecordsPrintsTheRawEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 16, 52, 0, 0, time.UTC)
	const id = "4a1b2c3d-0000-4000-8000-00000000abcd"
	var gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath = r.URL.Path
		if r.URL.Path != "/api/v1/chains/"+id+"/records" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"chain": chain.Chain{ID: id + "/kas-b", AuditID: id, State: chain.StateFinal, Class: chain.ClassProxyFailed,
				Findings: []chain.Finding{chain.FindingPeerDown}, Verb: "create", Resource: "podgroups", Code: 503,
				Entry: &chain.Side{APIServer: "kas-b", Code: 503, Stages: []string{"RequestReceived", "ResponseComplete"}}},
			"records": []chain.StoredRecord{
				{APIServer: "kas-b", Stage: "RequestReceived", StageTimestamp: t0, ReceivedAt: t0.Add(time.Second),
					Event: json.RawMessage(`{"auditID":"` + id + `","stage":"RequestReceived","verb":"create"}`)},
				{APIServer: "kas-b", Stage: "ResponseComplete", StageTimestamp: t0.Add(2 * time.Millisecond), ReceivedAt: t0.Add(time.Second),
					Event: json.RawMessage(`{"auditID":"` + id + `","stage":"ResponseComplete","responseStatus":{"code":503}}`)},
			},
		})
	}))
	defer srv.Close()
	t.Setenv(tokenEnv, "reader-token")
	out, err := runCLI(t, "chain", id, "--records", "--server", srv.URL)
	if err != nil {
		t.Fatalf("%v (asked %s)", err, gotPath)
	}
	for _, want := range []string{
		"proxy_failed (final)",
		"peer_down",
		"2 audit records:",
		"# kas-b RequestReceived at 2026-11-29T16:52:00.000000Z (received 2026-11-29T16:52:01.000000Z)",
		"# kas-b ResponseComplete at 2026-11-29T16:52:00.002000Z",
		`"stage": "ResponseComplete"`,
		`"code": 503`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("chain --records lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "chain", id, "--records", "-o", "json", "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Chain   chain.Chain          `json:"chain"`
		Records []chain.StoredRecord `json:"records"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Chain.AuditID != id || len(doc.Records) != 2 {
		t.Errorf("chain --records -o json: %v\n%s", err, out)
	}
}
