// Package simulate produces audit traffic shaped like what real kube-apiservers send, for load
// tests, benchmarks and demos.
package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

type actor struct {
	user   string
	groups []string
	agent  string
}

var actors = []actor{
	{"system:serviceaccount:kube-system:replicaset-controller", []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}, "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/6d6e9c5/system:serviceaccount:kube-system:replicaset-controller"},
	{"system:kube-scheduler", []string{"system:authenticated"}, "kube-scheduler/v1.35.4 (linux/amd64) kubernetes/6d6e9c5/leader-election"},
	{"system:node:worker-3", []string{"system:nodes", "system:authenticated"}, "kubelet/v1.35.4 (linux/amd64) kubernetes/6d6e9c5"},
	{"alice@example.com", []string{"platform-admins", "system:authenticated"}, "kubectl/v1.36.3 (linux/amd64) kubernetes/8b1a2c7"},
	{"system:serviceaccount:monitoring:prometheus", []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"}, "Prometheus/3.4.0"},
}

type target struct {
	group, version, resource, namespace string
}

var targets = []target{
	{"", "v1", "pods", "default"},
	{"", "v1", "configmaps", "kube-system"},
	{"apps", "v1", "deployments", "payments"},
	{"coordination.k8s.io", "v1", "leases", "kube-system"},
	{"batch", "v1", "jobs", "nightly"},
	{"scheduling.k8s.io", "v1alpha2", "podgroups", "training"},
	{"", "v1", "nodes", ""},
}

var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// Events generates audit events; it is not safe for concurrent use.
type Events struct {
	rng *rand.Rand
	seq uint64
	now func() time.Time
}

// NewEvents returns a generator seeded with seed; now stamps the events (nil: time.Now).
func NewEvents(seed uint64, now func() time.Time) *Events {
	if now == nil {
		now = time.Now
	}
	return &Events{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: now}
}

// Next returns one ResponseComplete event at Metadata level with a fresh auditID.
func (g *Events) Next() auditv1.Event {
	g.seq++
	a := actors[g.rng.IntN(len(actors))]
	t := targets[g.rng.IntN(len(targets))]
	verb := verbs[g.rng.IntN(len(verbs))]
	name := ""
	if verb != "list" && verb != "watch" && verb != "create" {
		name = fmt.Sprintf("%s-%05d", t.resource, g.rng.IntN(50000))
	}
	uri := "/api/" + t.version
	if t.group != "" {
		uri = "/apis/" + t.group + "/" + t.version
	}
	if t.namespace != "" {
		uri += "/namespaces/" + t.namespace
	}
	uri += "/" + t.resource
	if name != "" {
		uri += "/" + name
	}
	if verb == "list" {
		uri += "?limit=500&resourceVersion=0"
	}
	end := g.now().UTC()
	start := end.Add(-time.Duration(200+g.rng.IntN(30000)) * time.Microsecond)
	status := &metav1.Status{Code: 200}
	if verb == "create" {
		status.Code = 201
	}
	if g.rng.IntN(50) == 0 && name != "" {
		// A missing object, as an apiserver that serves the resource answers it: the whole
		// Status (a bare {"code":404} is what the entry of a forward records).
		qualified := t.resource
		if t.group != "" {
			qualified += "." + t.group
		}
		status = &metav1.Status{Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("%s %q not found", qualified, name),
			Details: &metav1.StatusDetails{Name: name, Group: t.group, Kind: t.resource}}
	}
	return auditv1.Event{
		Level:      auditv1.LevelMetadata,
		AuditID:    types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(g.rng.Uint64()), g.seq&0xffff, g.rng.IntN(0xfff), g.rng.IntN(0xfff), g.seq)),
		Stage:      auditv1.StageResponseComplete,
		RequestURI: uri,
		Verb:       verb,
		User: authnv1.UserInfo{
			Username: a.user,
			UID:      fmt.Sprintf("%x", g.rng.Uint64()),
			Groups:   a.groups,
			Extra:    map[string]authnv1.ExtraValue{"authentication.kubernetes.io/credential-id": {fmt.Sprintf("JTI=%x", g.rng.Uint64())}},
		},
		SourceIPs:                []string{fmt.Sprintf("10.0.%d.%d", g.rng.IntN(4), 1+g.rng.IntN(250))},
		UserAgent:                a.agent,
		ObjectRef:                &auditv1.ObjectReference{Resource: t.resource, Namespace: t.namespace, Name: name, APIGroup: t.group, APIVersion: t.version},
		ResponseStatus:           status,
		RequestReceivedTimestamp: metav1.NewMicroTime(start),
		StageTimestamp:           metav1.NewMicroTime(end),
		Annotations: map[string]string{
			"authorization.k8s.io/decision": "allow",
			"authorization.k8s.io/reason":   fmt.Sprintf("RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q to User %q", "binding-"+t.resource, "role-"+t.resource, a.user),
		},
	}
}

// EventList returns the JSON body of an EventList of n new events, as the webhook sends it.
func (g *Events) EventList(n int) ([]byte, []auditv1.Event, error) {
	list := auditv1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: auditv1.SchemeGroupVersion.String()}}
	list.Items = make([]auditv1.Event, n)
	for i := range list.Items {
		list.Items[i] = g.Next()
	}
	b, err := json.Marshal(&list)
	return b, list.Items, err
}

// Template is an EventList body whose auditIDs can be rewritten in place, so that producing
// another batch of distinct events costs a copy instead of a JSON encoding. Load generators and
// benchmarks use it to keep their own cost out of what they measure.
type Template struct {
	body    []byte
	offsets []int // start of each auditID's last 12 hex digits
	stamps  Stamps
}

// Stamps are where a rendered EventList's timestamps are, so that each batch made from it can
// be dated when it is sent. A batch that repeats the times it was rendered with is, a chain
// window later, a stream arriving minutes late, which no apiserver's is, and which sets off
// work in the correlator that a stream on time never does.
type Stamps struct {
	offsets []int   // start of each requestReceivedTimestamp's and stageTimestamp's value
	times   []int64 // its time, µs since 1970
	newest  int64
}

// microLayout is how metav1.MicroTime writes itself (always in UTC): 27 bytes.
const microLayout = "2006-01-02T15:04:05.000000Z07:00"

// FindStamps finds the requestReceivedTimestamp and stageTimestamp values of an EventList body
// as encoding/json writes it.
func FindStamps(body []byte) (Stamps, error) {
	var s Stamps
	for _, field := range []string{`"requestReceivedTimestamp":"`, `"stageTimestamp":"`} {
		for from := 0; ; {
			i := bytes.Index(body[from:], []byte(field))
			if i < 0 {
				break
			}
			start := from + i + len(field)
			end := bytes.IndexByte(body[start:], '"')
			if end < 0 {
				return Stamps{}, fmt.Errorf("timestamp at byte %d is not closed", start)
			}
			t, err := time.Parse(microLayout, string(body[start:start+end]))
			if err != nil || end != len("2006-01-02T15:04:05.000000Z") {
				return Stamps{}, fmt.Errorf("timestamp %q at byte %d is not a MicroTime in UTC", body[start:start+end], start)
			}
			s.offsets = append(s.offsets, start)
			s.times = append(s.times, t.UnixMicro())
			s.newest = max(s.newest, t.UnixMicro())
			from = start + end
		}
	}
	return s, nil
}

// Newest is the latest of the times found.
func (s Stamps) Newest() time.Time { return time.UnixMicro(s.newest) }

// Move rewrites the times in b, a copy of the body FindStamps read, each moved by d from
// what the body had, so that a request's times keep their order and spacing.
func (s Stamps) Move(b []byte, d time.Duration) {
	by := d.Microseconds()
	var buf [40]byte
	for i, off := range s.offsets {
		// Through buf: AppendFormat may write past the end of what it returns.
		copy(b[off:], time.UnixMicro(s.times[i]+by).UTC().AppendFormat(buf[:0], microLayout))
	}
}

// NewTemplate makes a template of n events from gen.
func NewTemplate(gen *Events, n int) (Template, error) {
	body, items, err := gen.EventList(n)
	if err != nil {
		return Template{}, err
	}
	stamps, err := FindStamps(body)
	if err != nil {
		return Template{}, err
	}
	t := Template{body: body, stamps: stamps}
	from := 0
	for _, it := range items {
		id := []byte(`"auditID":"` + string(it.AuditID) + `"`)
		i := bytes.Index(body[from:], id)
		if i < 0 {
			return Template{}, fmt.Errorf("auditID %s not found in template", it.AuditID)
		}
		start := from + i + len(id) - 1 - 12
		t.offsets = append(t.offsets, start)
		from = start
	}
	return t, nil
}

// Render returns a copy whose auditIDs are unique to (sender, seq) for sender < 4096 and
// seq < 2^20, its newest event written now.
func (t Template) Render(sender, seq int) []byte { return t.AppendRender(nil, sender, seq) }

// AppendRender is Render into dst's memory (dst's content is dropped): a load generator's own
// garbage would otherwise be collected by the server it measures when both share a process.
func (t Template) AppendRender(dst []byte, sender, seq int) []byte {
	b := append(dst[:0], t.body...)
	for i, off := range t.offsets {
		_ = fmt.Appendf(b[:off], "%03x%05x%04x", sender&0xfff, seq&0xfffff, i&0xffff) // overwrites in place
	}
	t.stamps.Move(b, time.Since(t.stamps.Newest()))
	return b
}
