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

// peertrail chain of an auditID a client gave to two requests (a DELETE of a Secret, then a
// harmless GET) prints both, "chain N of 2", and --chain one of them with the other listed;
// what the client chose reaches the terminal escaped, while -o json is the API's answer exact.
func TestChainPrintsEveryChainOfAnAuditID(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	const id = "x\x1b]0;owned\x07"
	del := &chain.Chain{ID: "c-delete", AuditID: id, State: chain.StateFinal, Class: chain.ClassLocal,
		Findings: []chain.Finding{chain.FindingAuditIDReused}, Verb: "delete", RequestURI: "/api/v1/namespaces/team/secrets/db",
		Version: "v1", Resource: "secrets", Code: 200, FirstReceived: t0,
		Entry: &chain.Side{APIServer: "kas-a", Code: 200, UserAgent: "evil\u202eagent", Stages: []string{"ResponseComplete"}}}
	get := &chain.Chain{ID: "c-get", AuditID: id, State: chain.StateFinal, Class: chain.ClassLocal,
		Findings: []chain.Finding{chain.FindingAuditIDReused}, Verb: "get", RequestURI: "/api/v1/namespaces/team/configmaps/c\x1b[2Jm",
		Version: "v1", Resource: "configmaps", Code: 200, FirstReceived: t0.Add(time.Minute),
		Entry: &chain.Side{APIServer: "kas-a", Code: 200, Stages: []string{"ResponseComplete"}}}
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI())
		ans := chain.ChainAnswer{Chain: get, ChainsWithAuditID: 2, OtherChains: []*chain.Chain{del}}
		if r.URL.Query().Get("chain") == "c-delete" {
			ans = chain.ChainAnswer{Chain: del, ChainsWithAuditID: 2, OtherChains: []*chain.Chain{get}}
		}
		json.NewEncoder(w).Encode(ans)
	}))
	defer srv.Close()
	t.Setenv(tokenEnv, "reader-token")

	out, err := runCLI(t, "chain", id, "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 chains with auditID", "--- chain 1 of 2: c-delete", "request:     delete /api/v1/namespaces/team/secrets/db",
		"--- chain 2 of 2: c-get", "audit_id_reused", `configmaps/c\x1b[2Jm`, `x\x1b]0;owned\x07`} {
		if !strings.Contains(out, want) {
			t.Errorf("chain lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Errorf("chain printed a control character raw:\n%q", out)
	}
	if strings.Index(out, "c-delete") > strings.Index(out, "c-get") {
		t.Errorf("not oldest first:\n%s", out)
	}

	out, err = runCLI(t, "chain", id, "--chain", "c-delete", "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"chain 1 of 2 with this auditID", "request:     delete", "the other chains of auditID", "c-get  local  get /api/v1/namespaces/team/configmaps/c\\x1b[2Jm"} {
		if !strings.Contains(out, want) {
			t.Errorf("chain --chain lacks %q:\n%s", want, out)
		}
	}
	if last := asked[len(asked)-1]; !strings.Contains(last, "chain=c-delete") {
		t.Errorf("asked %s", last)
	}

	out, err = runCLI(t, "chain", id, "-o", "json", "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var ans chain.ChainAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil || ans.Chain == nil || ans.RequestURI != get.RequestURI || ans.ChainsWithAuditID != 2 ||
		len(ans.OtherChains) != 1 || ans.OtherChains[0].Entry.UserAgent != "evil\u202eagent" {
		t.Errorf("-o json is not the answer exact: %v\n%s", err, out)
	}
}
