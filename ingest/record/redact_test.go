package record

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

const secretValue = "c3VwZXItc2VjcmV0" // what must not survive decoding

// secretEvent is an event of group/resource/subresource with both objects, shaped as a real
// apiserver writes a create at RequestResponse level; annotations is the raw annotations member
// ("" for none).
func secretEvent(id, group, resource, subresource, annotations string) string {
	ev := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"` + id + `",` +
		`"stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/secrets","verb":"create",` +
		`"user":{"username":"admin","groups":["system:masters"]},"sourceIPs":["127.0.0.1"],"userAgent":"curl/8",` +
		`"objectRef":{"resource":"` + resource + `","namespace":"default","name":"db","apiGroup":"` + group + `","apiVersion":"v1","subresource":"` + subresource + `"},` +
		`"responseStatus":{"metadata":{},"code":201},` +
		`"requestObject":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"db"},"data":{"password":"` + secretValue + `"}},` +
		`"responseObject":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"db","uid":"u"},"data":{"password":"` + secretValue + `"}},` +
		`"requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z","stageTimestamp":"2026-11-29T10:00:00.001000Z"`
	if annotations != "" {
		ev += `,` + annotations
	}
	return ev + `}`
}

func eventList(items ...string) []byte {
	return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`)
}

// TestRedactionDropsCredentialObjects: the objects of Secrets, TokenReviews and TokenRequests
// are gone from the raw event, which says so in an annotation and is otherwise the same event;
// other resources' events are kept byte for byte.
func TestRedactionDropsCredentialObjects(t *testing.T) {
	authz := `"annotations":{"authorization.k8s.io/decision":"allow"}`
	cases := []struct {
		name                         string
		group, resource, subresource string
		annotations                  string
		redacted                     bool
	}{
		{"secret", "", "secrets", "", authz, true},
		{"secret without annotations", "", "secrets", "", "", true},
		{"secret with empty annotations", "", "secrets", "", `"annotations":{}`, true},
		{"secret with null annotations", "", "secrets", "", `"annotations":null`, true},
		{"token review", "authentication.k8s.io", "tokenreviews", "", authz, true},
		{"token request", "", "serviceaccounts", "token", authz, true},
		{"service account itself", "", "serviceaccounts", "", authz, false},
		{"configmap", "", "configmaps", "", authz, false},
		{"secrets of another group", "example.com", "secrets", "", authz, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			item := secretEvent("a1", c.group, c.resource, c.subresource, c.annotations)
			body := eventList(item)
			recs, inv := mustDecode(t, body)
			if len(recs) != 1 || len(inv) != 0 {
				t.Fatalf("%d records, invalid %+v", len(recs), inv)
			}
			r := recs[0]
			stdRecs, _, err := (&Decoder{unmarshal: json.Unmarshal}).Decode(body, "kas-a", received)
			if err != nil || !reflect.DeepEqual(stdRecs, recs) {
				t.Fatalf("encoding/json's decoder differs: %v\n%+v\n%+v", err, stdRecs, recs)
			}
			if !c.redacted {
				if string(r.Raw) != item || r.Annotations[RedactedAnnotation] != "" {
					t.Fatalf("not a redacted resource, but raw changed: %s", r.Raw)
				}
				return
			}
			checkRedacted(t, r, "requestObject,responseObject")
			if c.annotations == authz && r.Annotations["authorization.k8s.io/decision"] != "allow" {
				t.Errorf("other annotations lost: %v", r.Annotations)
			}
			// The redacted event decodes to the same record, but for the objects.
			again, _ := mustDecode(t, eventList(string(r.Raw)))
			a := again[0]
			a.Raw, r.Raw = nil, nil
			if a.HasRequestObject || a.HasResponseObject {
				t.Fatalf("objects left: %+v", a)
			}
			a.HasRequestObject, a.RequestObjectBytes, a.HasResponseObject, a.ResponseObjectBytes =
				r.HasRequestObject, r.RequestObjectBytes, r.HasResponseObject, r.ResponseObjectBytes
			if !reflect.DeepEqual(a, r) {
				t.Fatalf("redacted event reads differently:\n got %+v\nwant %+v", a, r)
			}
		})
	}
}

func checkRedacted(t *testing.T, r Record, dropped string) {
	t.Helper()
	if strings.Contains(string(r.Raw), secretValue) || strings.Contains(strings.ToLower(string(r.Raw)), "object\":") {
		t.Fatalf("object left in the raw event: %s", r.Raw)
	}
	var ev map[string]any
	if err := json.Unmarshal(r.Raw, &ev); err != nil {
		t.Fatalf("redacted raw is not JSON: %v: %s", err, r.Raw)
	}
	if got := ev["annotations"].(map[string]any)[RedactedAnnotation]; got != dropped {
		t.Fatalf("raw annotation %q, want %q: %s", got, dropped, r.Raw)
	}
	if r.Annotations[RedactedAnnotation] != dropped || !r.HasRequestObject && !r.HasResponseObject {
		t.Fatalf("record does not say what was dropped: %v, objects %v %v", r.Annotations, r.HasRequestObject, r.HasResponseObject)
	}
}

// TestRedactionCannotBeDodged: keys encoding/json reads as the object fields whatever their
// spelling, a batch big enough to be decoded in parallel, an invalid item kept as a dead letter,
// and a resource added by configuration.
func TestRedactionCannotBeDodged(t *testing.T) {
	item := secretEvent("a1", "", "secrets", "", "")
	// Another case, and an escaped key, are the same field to encoding/json.
	item = strings.Replace(item, `"requestObject"`, `"RequestObject"`, 1)
	item = strings.Replace(item, `"responseObject"`, `"respons\u0065Object"`, 1)
	recs, _ := mustDecode(t, eventList(item))
	checkRedacted(t, recs[0], "requestObject,responseObject")

	items := make([]string, 3*parallelDecodeMin)
	for i := range items {
		items[i] = secretEvent("p", "", "secrets", "", "")
	}
	recs, _ = mustDecode(t, eventList(items...))
	for _, r := range recs {
		checkRedacted(t, r, "requestObject,responseObject")
	}

	// Invalid items are kept as dead letters: without the objects of a redacted resource too,
	// whether they decoded (a time out of range), did not (a field of the wrong type), or were
	// too deep to read at all; without any objects when their objectRef cannot be read.
	secret := secretEvent("a2", "", "secrets", "", "")
	configMap := secretEvent("a3", "", "configmaps", "", "")
	deep := strings.Replace(secret, `"data":{`, `"deep":`+strings.Repeat("[", 2000)+strings.Repeat("]", 2000)+`,"data":{`, 1)
	for name, c := range map[string]struct {
		item     string
		redacted bool
	}{
		"time out of range":     {strings.Replace(secret, "2026-11-29T10:00:00.001000Z", "9999-01-01T00:00:00.000000Z", 1), true},
		"wrong type":            {strings.Replace(secret, `"code":201`, `"code":"201"`, 1), true},
		"too deep":              {deep, true},
		"objectRef unreadable":  {strings.Replace(configMap, `"objectRef":{`, `"objectRef":"x","x":{`, 1), true},
		"configmap, wrong type": {strings.Replace(configMap, `"code":201`, `"code":"201"`, 1), false},
		"no objectRef":          {strings.Replace(strings.Replace(configMap, `"objectRef":{`, `"x":{`, 1), `"code":201`, `"code":"201"`, 1), false},
	} {
		_, inv := mustDecode(t, eventList(c.item))
		if len(inv) != 1 {
			t.Fatalf("%s: %d invalid", name, len(inv))
		}
		if got := string(inv[0].Raw); c.redacted != (got != c.item) ||
			c.redacted && (strings.Contains(got, secretValue) || !strings.Contains(got, RedactedAnnotation)) {
			t.Errorf("%s: dead letter kept as %.300s", name, got)
		}
	}

	x, err := NewRedaction("widgets.example.com")
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder()
	d.Redact(x)
	recs, _, err = d.Decode(eventList(secretEvent("w", "example.com", "widgets", "", ""), secretEvent("s", "", "secrets", "", "")), "kas-a", received)
	if err != nil || len(recs) != 2 {
		t.Fatal(err)
	}
	checkRedacted(t, recs[0], "requestObject,responseObject")
	checkRedacted(t, recs[1], "requestObject,responseObject")
	for _, bad := range []string{"", ".example.com", "a/b/c"} {
		if _, err := NewRedaction(bad); err == nil {
			t.Errorf("NewRedaction(%q) accepted", bad)
		}
	}
}

// TestRedactRefused: a body refused as a whole (one item is not JSON) is kept without the
// Secret's objects of the items beside it; what cannot be split is kept as it is.
func TestRedactRefused(t *testing.T) {
	secret, configMap := secretEvent("s", "", "secrets", "", ""), secretEvent("c", "", "configmaps", "", "")
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + configMap + `, ` + secret + `,{"broken":tru}, ` + secret + "]}\n")
	d := NewDecoder()
	if _, _, err := d.Decode(body, "kas-a", received); err == nil {
		t.Fatal("a body with an item that is not JSON was accepted")
	}
	out := string(d.RedactRefused(body))
	if strings.Count(out, secretValue) != 2 || strings.Count(out, RedactedAnnotation) != 2 ||
		!strings.Contains(out, configMap+`, `) || !strings.HasSuffix(out, "]}\n") || !strings.Contains(out, `{"broken":tru}`) {
		t.Fatalf("refused body kept as %s", out)
	}
	for _, b := range []string{`{"Items":[` + secret + `]}`, `not json ` + secret} {
		if out := d.RedactRefused([]byte(b)); string(out) != b {
			t.Errorf("%.20s: changed to %.100s", b, out)
		}
	}
}
