// Package attack attacks a running peertrail as a hostile or broken client would, and checks
// both the answer and that nothing else changed: what the store, the spool and the dead
// letters hold, and the metrics.
package attack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/server"
)

// target is a peertrail serving in this process, as `peertrail serve` runs it (server.New).
type target struct {
	t      *testing.T
	srv    *server.Server
	dir    string
	cancel context.CancelFunc
	done   chan error
}

// start runs peertrail on a free loopback port with the embedded store, chains final after a
// second; edit adjusts the configuration.
func start(t *testing.T, edit func(*config.File)) *target {
	t.Helper()
	cfg := config.Defaults()
	cfg.Store.Unconfined = true // in-process servers share one engine's threads, which Landlock would bind to the first's directory; the binary runs confined in test/attack/sql_test.go
	cfg.Listen = "127.0.0.1:0"
	cfg.Store.SQLListen = ""
	cfg.InsecureHTTP = true
	cfg.AcceptUnknownAPIServers = true
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Correlate.ChainWindow = config.Duration(time.Second)
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	tg := &target{t: t, srv: srv, dir: cfg.DataDir, cancel: cancel, done: make(chan error, 1)}
	go func() { tg.done <- srv.Run(ctx) }()
	t.Cleanup(tg.stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := tg.get("/readyz"); code == http.StatusOK {
			return tg
		}
		if time.Now().After(deadline) {
			t.Fatal("peertrail never became ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops peertrail; the data directory stays for inspection.
func (tg *target) stop() {
	if tg.cancel == nil {
		return
	}
	tg.cancel()
	<-tg.done
	tg.cancel = nil
}

// post sends body as one webhook batch of apiserver and returns the answer.
func (tg *target) post(apiserver string, body []byte) (int, string) {
	tg.t.Helper()
	resp, err := http.Post(tg.srv.URL()+"/audit/"+apiserver, "application/json", bytes.NewReader(body))
	if err != nil {
		tg.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// get is the one place this file reads peertrail over HTTP: the probes, which need no
// credentials. Should a path here ever need a reader's credentials, they go here.
func (tg *target) get(path string) (int, string) {
	resp, err := http.Get(tg.srv.URL() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of the sample of name whose labels include labels (name=value
// pairs), summed, read from the registry /metrics serves.
func (tg *target) metric(name string, labels ...string) float64 {
	tg.t.Helper()
	mfs, err := tg.srv.Registry().Gather()
	if err != nil {
		tg.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	sample:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue sample
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// query runs a read on the store.
func (tg *target) query(sql string, params map[string]string) [][]string {
	tg.t.Helper()
	res, err := tg.srv.Store().Query(context.Background(), sql, params)
	if err != nil {
		tg.t.Fatalf("%s: %v", sql, err)
	}
	return res.Rows
}

// waitRows polls sql until its one value is want.
func (tg *target) waitRows(sql string, want string) {
	tg.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		if rows := tg.query(sql, nil); len(rows) == 1 && len(rows[0]) == 1 {
			if got = rows[0][0]; got == want {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	tg.t.Fatalf("%s: %s, want %s", sql, got, want)
}

// deadLetters reads every dead letter kept under the data directory.
func (tg *target) deadLetters() []ingest.DeadLetter {
	tg.t.Helper()
	var out []ingest.DeadLetter
	files, _ := filepath.Glob(filepath.Join(tg.dir, "deadletter", "*.jsonl"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tg.t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var dl ingest.DeadLetter
			if err := json.Unmarshal(sc.Bytes(), &dl); err != nil {
				tg.t.Fatalf("dead letter %s: %v", f, err)
			}
			out = append(out, dl)
		}
	}
	return out
}

// spooled reads every record in the spool; peertrail must have stopped.
func (tg *target) spooled() []record.Record {
	tg.t.Helper()
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(tg.dir, "spool"), MaxBytes: 1 << 40})
	if err != nil {
		tg.t.Fatal(err)
	}
	defer sp.Close()
	codec, err := record.NewCodec()
	if err != nil {
		tg.t.Fatal(err)
	}
	defer codec.Close()
	r := sp.NewReader(0)
	defer r.Close()
	var out []record.Record
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			tg.t.Fatal(err)
		}
		if !ok {
			return out
		}
		b, err := codec.DecodeFrame(e.Payload)
		if err != nil {
			tg.t.Fatal(err)
		}
		out = append(out, b.Records...)
	}
}

// filesContaining lists the files under the data directory that hold needle as bytes.
func (tg *target) filesContaining(needle string) []string {
	tg.t.Helper()
	var out []string
	err := filepath.WalkDir(tg.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(needle)) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		tg.t.Fatal(err)
	}
	return out
}

func eventList(items ...string) []byte {
	return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`)
}

// event is an ordinary ResponseComplete of a get, as an apiserver writes it; extra are more
// members, raw, and override the timestamps when they name them.
func event(id, received, stage string, extra ...string) string {
	ev := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + id + `","stage":"ResponseComplete",` +
		`"requestURI":"/api/v1/namespaces/default/pods/web-1","verb":"get","user":{"username":"alice","groups":["dev"]},` +
		`"sourceIPs":["10.1.2.3"],"userAgent":"kubectl/v1.36.3","objectRef":{"resource":"pods","namespace":"default","name":"web-1","apiVersion":"v1"},` +
		`"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"` + received + `","stageTimestamp":"` + stage + `"`
	for _, e := range extra {
		ev += "," + e
	}
	return ev + `}`
}

// now is an event time of this run, so that chains and the gate's window see recent requests.
func now(d time.Duration) string {
	return time.Now().UTC().Add(d).Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
}

// TestNestedItemIsDeadLetteredAlone: one item nested far past any JSON library's limit, between
// two good ones. The batch is answered 200; the good items are stored, the deep one is a dead
// letter saying why, and nothing else is stored or counted.
func TestNestedItemIsDeadLetteredAlone(t *testing.T) {
	tg := start(t, nil)
	for _, depth := range []int{10_001, 200_000} {
		good1, good2 := fmt.Sprintf("good-%d-1", depth), fmt.Sprintf("good-%d-2", depth)
		deep := `{"auditID":"deep-` + fmt.Sprint(depth) + `","stage":"ResponseComplete","stageTimestamp":"` + now(0) + `","requestObject":` +
			strings.Repeat(`{"a":[`, depth/2) + `1` + strings.Repeat(`]}`, depth/2) + `}`
		code, msg := tg.post("kas-a", eventList(event(good1, now(0), now(time.Millisecond)), deep, event(good2, now(0), now(time.Millisecond))))
		if code != http.StatusOK || msg != "accepted 2, duplicate 0, invalid 1" {
			t.Fatalf("depth %d: answer %d %q", depth, code, msg)
		}
	}
	tg.waitRows(`SELECT count() FROM peertrail.events`, "4")
	if rows := tg.query(`SELECT count() FROM peertrail.events WHERE audit_id LIKE 'deep-%'`, nil); rows[0][0] != "0" {
		t.Errorf("deep items stored: %v", rows)
	}
	dead := tg.deadLetters()
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want the 2 deep items", len(dead))
	}
	for _, d := range dead {
		if d.Index != 1 || d.APIServer != "kas-a" || !strings.Contains(d.Reason, "nested") || !strings.Contains(d.Raw, `"auditID":"deep-`) {
			t.Errorf("dead letter: index %d apiserver %s reason %q", d.Index, d.APIServer, d.Reason)
		}
	}
	if got := tg.metric(metrics.IngestEventsTotal, metrics.LabelResult, metrics.ResultInvalid); got != 2 {
		t.Errorf("%v invalid events counted, want 2", got)
	}
	if got := tg.metric(metrics.IngestEventsTotal, metrics.LabelResult, metrics.ResultAccepted); got != 4 {
		t.Errorf("%v events accepted, want 4", got)
	}
	if code, body := tg.get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz after the attack: %d %s", code, body)
	}
}

// TestOutOfRangeTimesAreDeadLettered: times the store's DateTime64 columns cannot hold are dead
// letters with the reason, never stored as other times; the range's own bounds are stored
// exactly as sent.
func TestOutOfRangeTimesAreDeadLettered(t *testing.T) {
	tg := start(t, nil)
	bad := map[string]string{
		"stage-9999":    event("stage-9999", now(0), "9999-01-01T00:00:00.000000Z"),
		"stage-0001":    event("stage-0001", "0001-01-01T00:00:00.000001Z", "0001-01-01T00:00:00.000001Z"),
		"stage-2300":    event("stage-2300", now(0), "2300-01-01T00:00:00.000000Z"),
		"stage-2299":    event("stage-2299", now(0), "2299-12-31T23:59:59.999999Z"), // in DateTime64's range, past the writer's
		"stage-2262":    event("stage-2262", now(0), "2262-04-11T23:47:16.854776Z"),
		"stage-1899":    event("stage-1899", "1899-12-31T23:59:59.999999Z", "1899-12-31T23:59:59.999999Z"),
		"received-9999": event("received-9999", "9999-01-01T00:00:00.000000Z", now(0)),
		"received-1000": event("received-1000", "1000-01-01T00:00:00.000000Z", now(0)),
	}
	good := map[string][2]string{
		"lowest":  {"1900-01-01T00:00:00.000000Z", "1900-01-01T00:00:00.000000Z"},
		"highest": {"2262-04-11T23:47:16.854775Z", "2262-04-11T23:47:16.854775Z"}, // record.MaxTime
		"today":   {now(0), now(time.Millisecond)},
	}
	var items []string
	for _, it := range bad {
		items = append(items, it)
	}
	for id, ts := range good {
		items = append(items, event(id, ts[0], ts[1]))
	}
	code, msg := tg.post("kas-a", eventList(items...))
	if code != http.StatusOK || msg != fmt.Sprintf("accepted %d, duplicate 0, invalid %d", len(good), len(bad)) {
		t.Fatalf("answer %d %q", code, msg)
	}
	tg.waitRows(`SELECT count() FROM peertrail.events`, fmt.Sprint(len(good)))
	for _, row := range tg.query(`SELECT audit_id, toString(request_received_timestamp), toString(stage_timestamp) FROM peertrail.events`, nil) {
		want, ok := good[row[0]]
		if !ok {
			t.Errorf("stored %s", row[0])
			continue
		}
		for i, ts := range want {
			tm, _ := time.Parse(time.RFC3339Nano, ts)
			if s := tm.Format("2006-01-02 15:04:05.000000"); row[1+i] != s {
				t.Errorf("%s stored as %s, sent %s", row[0], row[1+i], s)
			}
		}
	}
	dead := tg.deadLetters()
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(bad))
	}
	for _, d := range dead {
		var ev struct{ AuditID string }
		json.Unmarshal([]byte(d.Raw), &ev)
		if _, ok := bad[ev.AuditID]; !ok || !strings.Contains(d.Reason, "outside the range the store holds (1900-01-01 to 2262-04-11)") {
			t.Errorf("dead letter %s: %q", ev.AuditID, d.Reason)
		}
		if d.Raw != bad[ev.AuditID] {
			t.Errorf("dead letter %s changed: %s", ev.AuditID, d.Raw)
		}
	}
}

// The secrets of testdata/real-secrets (TestCaptureRealSecrets): the Secret's value as sent in
// data and in stringData, as the apiserver answers stringData (in data, base64), and the token
// the TokenRequest issued and the TokenReview reviewed.
func secretNeedles(t *testing.T) []string {
	tok, err := os.ReadFile("testdata/real-secrets/issued-token.txt")
	if err != nil {
		t.Fatal(err)
	}
	plainB64 := base64.StdEncoding.EncodeToString([]byte(secretPlain))
	return []string{secretBase64, secretPlain, plainB64, string(tok), string(tok[len(tok)-40:])}
}

// TestSecretsNeverStored posts what a real kube-apiserver sent for a Secret create and get, a
// TokenRequest and a TokenReview at RequestResponse level, and the Secret create made invalid
// two ways. The events are stored, marked as redacted, the invalid ones are dead letters, and no
// secret value is in the store, the spool, a dead letter or any file under the data directory;
// events of other resources keep their objects byte for byte.
func TestSecretsNeverStored(t *testing.T) {
	bodies, _ := filepath.Glob("testdata/real-secrets/kas-a-*.json")
	if len(bodies) == 0 {
		t.Fatal("no captured bodies in testdata/real-secrets (TestCaptureRealSecrets)")
	}
	needles := secretNeedles(t)
	// What was sent: how many events, which carry objects of a redacted resource, and the raw
	// events of the others.
	redaction, err := record.NewRedaction()
	if err != nil {
		t.Fatal(err)
	}
	var sent, redacted int
	var secretCreate []byte // its ResponseComplete, with both objects
	kept := map[record.Key][]byte{}
	var raw [][]byte
	for _, p := range bodies {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, n := range needles[:4] {
			found = found || bytes.Contains(b, []byte(n))
		}
		raw = append(raw, b)
		var env struct{ Items []json.RawMessage }
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		for _, it := range env.Items {
			if bytes.Contains(it, []byte(`"verb":"create"`)) && bytes.Contains(it, []byte(`"resource":"secrets"`)) && bytes.Contains(it, []byte(secretBase64)) {
				secretCreate = it
			}
			var ev struct {
				AuditID, Stage string
				StageTimestamp time.Time
				ObjectRef      struct{ APIGroup, Resource, Subresource string }
				RequestObject  json.RawMessage
				ResponseObject json.RawMessage
			}
			if err := json.Unmarshal(it, &ev); err != nil {
				t.Fatal(err)
			}
			sent++
			r := record.Record{Group: ev.ObjectRef.APIGroup, Resource: ev.ObjectRef.Resource, Subresource: ev.ObjectRef.Subresource}
			switch {
			case redaction.Matches(&r) && (ev.RequestObject != nil || ev.ResponseObject != nil):
				redacted++
			default:
				kept[record.KeyOf("kas-a", ev.AuditID, ev.Stage, ev.StageTimestamp)] = it
			}
		}
	}
	if !bytes.Contains(bytes.Join(raw, nil), []byte(needles[0])) || !bytes.Contains(bytes.Join(raw, nil), []byte(needles[3])) || redacted < 4 {
		t.Fatalf("the capture lacks what this test looks for (%d redactable events)", redacted)
	}

	tg := start(t, nil)
	for i, b := range raw {
		if code, msg := tg.post("kas-a", b); code != http.StatusOK || !strings.HasSuffix(msg, "invalid 0") {
			t.Fatalf("body %d: %d %q", i, code, msg)
		}
	}
	// The same event made invalid two ways is a dead letter, without the Secret either.
	var ts struct{ StageTimestamp string }
	json.Unmarshal(secretCreate, &ts)
	invalid := eventList(strings.Replace(string(secretCreate), ts.StageTimestamp, "9999-01-01T00:00:00.000000Z", 1),
		strings.Replace(string(secretCreate), `"code":201`, `"code":"201"`, 1))
	if !bytes.Contains(invalid, []byte("9999-01-01")) || !bytes.Contains(invalid, []byte(`"code":"201"`)) {
		t.Fatal("the capture's Secret create is not in the expected shape")
	}
	if code, msg := tg.post("kas-a", invalid); code != http.StatusOK || msg != "accepted 0, duplicate 0, invalid 2" {
		t.Fatalf("invalid Secret events: %d %q", code, msg)
	}
	// And beside an item that is not JSON, which makes the whole body refused (and kept).
	refused := eventList(string(secretCreate), `{"auditID":tru}`)
	if code, _ := tg.post("kas-a", refused); code != http.StatusBadRequest {
		t.Fatalf("a body with an item that is not JSON: %d", code)
	}
	tg.waitRows(`SELECT count() FROM peertrail.events`, fmt.Sprint(sent))
	rows := tg.query(`SELECT countIf(annotations['`+record.RedactedAnnotation+`'] != ''),
		countIf(position(raw, '`+record.RedactedAnnotation+`') > 0), countIf(has_request_object OR has_response_object) FROM peertrail.events`, nil)
	if rows[0][0] != fmt.Sprint(redacted) || rows[0][1] != fmt.Sprint(redacted) {
		t.Errorf("redacted events marked %v times (column, raw), want %d", rows[0][:2], redacted)
	}
	for _, n := range needles {
		if rows := tg.query(`SELECT count() FROM peertrail.events WHERE position(raw, {n:String}) > 0 OR position(toString(annotations), {n:String}) > 0`,
			map[string]string{"n": n}); rows[0][0] != "0" {
			t.Errorf("the store's events hold secret %.12s...: %v", n, rows)
		}
	}
	tg.stop()

	recs := tg.spooled()
	if len(recs) != sent {
		t.Fatalf("%d records spooled, %d sent", len(recs), sent)
	}
	for _, r := range recs {
		for _, n := range needles {
			if bytes.Contains(r.Raw, []byte(n)) {
				t.Fatalf("spooled %s %s holds secret %.12s...", r.Resource, r.Stage, n)
			}
		}
		if want, ok := kept[r.Key()]; ok && !bytes.Equal(r.Raw, want) {
			t.Errorf("event of %s changed: %s", r.Resource, r.Raw)
		}
	}
	for _, n := range needles {
		if files := tg.filesContaining(n); len(files) > 0 {
			t.Errorf("secret %.12s... in %v", n, files)
		}
	}
	dead := tg.deadLetters()
	if len(dead) != 3 {
		t.Fatalf("%d dead letters, want the 2 invalid Secret events and the refused body", len(dead))
	}
	for _, d := range dead {
		if !strings.Contains(d.Raw, record.RedactedAnnotation) || !strings.Contains(d.Raw, `"name":"db-password"`) {
			t.Errorf("dead letter %q: %.200s", d.Reason, d.Raw)
		}
	}
}

// TestReusedAuditIDFlood posts 60k records of one auditID (a client may set its own Audit-ID),
// each of another request. Meanwhile /healthz, the metrics and a normal batch answer promptly;
// afterwards the auditID has at most correlate.MaxChainRecords chains, each with finding
// audit_id_reused, every record beyond is counted (by the newest), and the store holds every
// event.
func TestReusedAuditIDFlood(t *testing.T) {
	tg := start(t, nil)
	const n, batch = 60_000, 400
	base := time.Now().UTC().Truncate(time.Second)
	bodies := make([][]byte, 0, n/batch)
	for i := 0; i < n; i += batch {
		items := make([]string, 0, batch)
		for k := i; k < i+batch; k++ {
			ts := base.Add(time.Duration(k) * time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
			items = append(items, strings.Replace(event("flood", ts, ts),
				`pods/web-1"`, fmt.Sprintf(`pods/web-1?k=%d"`, k), 1))
		}
		bodies = append(bodies, eventList(items...))
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest = map[string]time.Duration{}
	probe := func(what string, f func()) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			t0 := time.Now()
			f()
			d := time.Since(t0)
			mu.Lock()
			slowest[what] = max(slowest[what], d)
			mu.Unlock()
		}
	}
	wg.Add(3)
	go probe("healthz", func() {
		if code, _ := tg.get("/healthz"); code != http.StatusOK {
			t.Errorf("healthz %d", code)
		}
	})
	go probe("metrics", func() { tg.metric(metrics.CorrelateRecordsTotal) })
	normal := 0
	go probe("normal batch", func() {
		normal++
		id := fmt.Sprintf("normal-%d", normal)
		if code, msg := tg.post("kas-b", eventList(event(id, now(0), now(time.Millisecond)))); code != http.StatusOK {
			t.Errorf("normal batch: %d %s", code, msg)
		}
	})
	for _, b := range bodies {
		if code, msg := tg.post("kas-a", b); code != http.StatusOK || msg != fmt.Sprintf("accepted %d, duplicate 0, invalid 0", batch) {
			t.Fatalf("flood batch: %d %q", code, msg)
		}
	}
	// The correlator has joined all of them when the dropped count stops growing at n - cap.
	want := float64(n - correlate.MaxChainRecords)
	deadline := time.Now().Add(60 * time.Second)
	for tg.metric(metrics.CorrelateDroppedRecordsTotal) < want && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// Before the cap the flood held the correlator's lock, and with it /metrics, the gate and
	// the API, for two minutes. What is left of a wait is the store: the correlator writes
	// chains to it under that lock, behind the writer's insert of the flood's 60k events (0.5-2 s
	// on two busy cores; with no store, metrics take 30 ms). The webhook and the probes never
	// wait for the correlator.
	limits := map[string]time.Duration{"healthz": 2 * time.Second, "normal batch": 2 * time.Second, "metrics": 5 * time.Second}
	for what, d := range slowest {
		t.Logf("slowest %s during the flood: %s", what, d)
		if d > limits[what] {
			t.Errorf("%s took %s during the flood", what, d)
		}
	}
	if got := tg.metric(metrics.CorrelateDroppedRecordsTotal); got != want {
		t.Errorf("%v records dropped, want %v", got, want)
	}
	tg.waitRows(`SELECT count() FROM peertrail.events WHERE audit_id = 'flood'`, fmt.Sprint(n))
	tg.waitRows(`SELECT uniqExact(id) FROM peertrail.chains WHERE audit_id = 'flood'`, fmt.Sprint(correlate.MaxChainRecords))
	// Every chain of the auditID says so (it names more than one request, issue 39); the one
	// that took the drops counts them.
	tg.waitRows(`SELECT uniqExactIf(id, has(findings, 'audit_id_reused')) FROM peertrail.chains FINAL WHERE audit_id = 'flood'`, fmt.Sprint(correlate.MaxChainRecords))
	tg.waitRows(`SELECT uniqExactIf(id, records > 1) FROM peertrail.chains FINAL WHERE audit_id = 'flood'`, "1")
	// Every normal request became a chain of its own, none with the finding.
	if normal == 0 {
		t.Fatal("no normal batch was sent during the flood")
	}
	tg.waitRows(`SELECT count() FROM peertrail.chains FINAL WHERE audit_id LIKE 'normal-%' AND state = 'final'`, fmt.Sprint(normal))
	tg.waitRows(`SELECT countIf(has(findings, 'audit_id_reused')) FROM peertrail.chains FINAL WHERE audit_id LIKE 'normal-%'`, "0")
	if dead := tg.deadLetters(); len(dead) != 0 {
		t.Errorf("%d dead letters", len(dead))
	}
}

// TestConfiguredResourceRedacted: a resource added by configuration (redactResources) loses its
// objects too, and an invalid entry stops peertrail from starting rather than redacting less.
func TestConfiguredResourceRedacted(t *testing.T) {
	body, err := os.ReadFile("testdata/real-secrets/kas-a-2.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`"name":"robot"`)) {
		t.Fatal("the capture lacks the ServiceAccount create")
	}
	tg := start(t, func(c *config.File) { c.RedactResources = []string{"serviceaccounts"} })
	if code, msg := tg.post("kas-a", body); code != http.StatusOK || !strings.HasSuffix(msg, "invalid 0") {
		t.Fatalf("%d %q", code, msg)
	}
	tg.waitRows(`SELECT count() FROM peertrail.events`, fmt.Sprint(bytes.Count(body, []byte(`"auditID"`))))
	rows := tg.query(`SELECT countIf(annotations['`+record.RedactedAnnotation+`'] = ''), count() FROM peertrail.events
		WHERE resource = 'serviceaccounts' AND subresource = '' AND (has_request_object OR has_response_object)`, nil)
	if rows[0][0] != "0" || rows[0][1] == "0" {
		t.Errorf("ServiceAccount events with objects not redacted: %v of %v", rows[0][0], rows[0][1])
	}
	if rows := tg.query(`SELECT count() FROM peertrail.events WHERE position(raw, '"name":"robot","namespace":"default","uid"') > 0`, nil); rows[0][0] != "0" {
		t.Errorf("the ServiceAccount object is stored: %v", rows)
	}

	cfg := config.Defaults()
	cfg.Store.Unconfined = true // in-process servers share one engine's threads, which Landlock would bind to the first's directory; the binary runs confined in test/attack/sql_test.go
	cfg.DataDir = t.TempDir()
	cfg.Listen, cfg.Store.Engine, cfg.InsecureHTTP, cfg.AcceptUnknownAPIServers = "127.0.0.1:0", "none", true, true
	cfg.RedactResources = []string{"a/b/c"}
	if srv, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "redactResources") {
		if srv != nil {
			srv.Run(canceled())
		}
		t.Fatalf("started with an invalid redactResources entry: %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
