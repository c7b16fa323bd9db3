package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/test/e2e/harness"
)

var captureSecrets = flag.Bool("capture-secrets", false, "rewrite testdata/real-secrets from a real kube-apiserver")

// secretsPolicy logs the credential-bearing resources with their objects.
const secretsPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: RequestResponse
  resources:
  - group: ""
    resources: ["secrets", "serviceaccounts/token", "serviceaccounts"]
  - group: "authentication.k8s.io"
    resources: ["tokenreviews"]
- level: None
`

// TestCaptureRealSecrets writes the webhook bodies a real kube-apiserver (harness.NewVersion)
// posts for a Secret create and get, a TokenRequest and a TokenReview at RequestResponse level,
// the input of TestSecretsNeverStored. Run with the cached binaries (scripts/build-kube.sh):
//
//	go test ./test/attack -run TestCaptureRealSecrets -count=1 -v -capture-secrets
func TestCaptureRealSecrets(t *testing.T) {
	if !*captureSecrets {
		t.Skip("run with -capture-secrets to rewrite testdata/real-secrets")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := harness.TempDir(t)
	pki, err := harness.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := harness.StartRecorder(pki.ServerCA, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(secretsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := harness.Start(ctx, t, harness.Config{
		Dir: dir, PKI: pki, AuditPolicyFile: policy,
		Servers: []harness.ServerConfig{{Name: "kas-a", Version: harness.NewVersion}},
		Webhook: &harness.WebhookConfig{URL: rec.WebhookURL, BatchMaxWait: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := harness.HTTPClient(c.AdminConfig("kas-a"))
	if err != nil {
		t.Fatal(err)
	}
	base := c.Server("kas-a").URL
	do := func(method, path, body string, want int) []byte {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	do("POST", "/api/v1/namespaces/default/secrets",
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db-password"},"type":"Opaque","data":{"password":"`+secretBase64+`"},"stringData":{"token":"`+secretPlain+`"}}`, 201)
	do("GET", "/api/v1/namespaces/default/secrets/db-password", "", 200)
	do("POST", "/api/v1/namespaces/default/serviceaccounts", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"robot"}}`, 201)
	tr := do("POST", "/api/v1/namespaces/default/serviceaccounts/robot/token",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["api"],"expirationSeconds":3600}}`, 201)
	var treq struct {
		Status struct{ Token string } `json:"status"`
	}
	if err := json.Unmarshal(tr, &treq); err != nil || treq.Status.Token == "" {
		t.Fatalf("token request: %v %s", err, tr)
	}
	do("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"`+treq.Status.Token+`"}}`, 201)

	// Everything above is in a batch within two batch waits.
	deadline := time.Now().Add(30 * time.Second)
	var bodies [][]byte
	for time.Now().Before(deadline) {
		bodies = bodies[:0]
		n := 0
		for _, p := range rec.Posts() {
			bodies = append(bodies, p.Body)
			n += bytes.Count(p.Body, []byte(`"auditID"`))
		}
		if bytes.Contains(bytes.Join(bodies, nil), []byte(`"tokenreviews"`)) && n >= 10 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	out := filepath.Join("testdata", "real-secrets")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range bodies {
		if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("kas-a-%d.json", i+1)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The issued token is kept in a file of its own, so the test can look for it.
	if err := os.WriteFile(filepath.Join(out, "issued-token.txt"), []byte(treq.Status.Token), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bodies written to %s", len(bodies), out)
}

// The secret values of the capture: what must never reach the spool, the store or a dead letter.
const (
	secretPlain  = "peertrail-attack-plaintext-0b8f"
	secretBase64 = "cGVlcnRyYWlsLWF0dGFjay1iYXNlNjQtN2Q0YQ==" // peertrail-attack-base64-7d4a
)
