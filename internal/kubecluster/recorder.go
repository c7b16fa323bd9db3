package kubecluster

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Recorder is a trivial HTTPS audit webhook receiver: it records the body of
// every POST, per URL path, answers 200, and optionally writes each body to
// Dir/<last path element>-<n>.json. It is the "ground truth" tap for e2e
// tests and fixture capture, independent of peertrail's own receiver.
type Recorder struct {
	// URL is https://127.0.0.1:<port>; apiserver <name> should post to
	// URL + "/audit/" + name (see WebhookURL).
	URL string
	// Dir, if set, receives every body as a file.
	Dir string

	srv *http.Server
	ln  net.Listener

	mu    sync.Mutex
	posts []Post
	seq   map[string]int
	subs  []chan struct{}
}

// Post is one webhook request as received.
type Post struct {
	Path     string // e.g. /audit/kas-a
	Server   string // last element of Path
	Seq      int    // 1-based per Path
	Received time.Time
	Body     []byte
}

// StartRecorder listens on a free loopback port with a serving certificate
// issued by ca for 127.0.0.1 and localhost. Close it when done.
func StartRecorder(ca *CA, dir string) (*Recorder, error) {
	kp, err := ca.IssueServing("audit-recorder", "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	cert, err := kp.TLSCertificate()
	if err != nil {
		return nil, err
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Recorder{Dir: dir, ln: ln, seq: map[string]int{}}
	r.URL = "https://" + ln.Addr().String()
	r.srv = &http.Server{
		Handler:   http.HandlerFunc(r.handle),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
	}
	go r.srv.ServeTLS(ln, "", "")
	return r, nil
}

// WebhookURL is the per-apiserver URL function for WebhookConfig.URL.
func (r *Recorder) WebhookURL(server string) string { return r.URL + "/audit/" + server }

func (r *Recorder) handle(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := Post{Path: req.URL.Path, Server: lastElem(req.URL.Path), Received: time.Now(), Body: body}
	r.mu.Lock()
	r.seq[p.Path]++
	p.Seq = r.seq[p.Path]
	r.posts = append(r.posts, p)
	subs := r.subs
	r.subs = nil
	r.mu.Unlock()
	for _, ch := range subs {
		close(ch)
	}
	if r.Dir != "" {
		_ = os.WriteFile(filepath.Join(r.Dir, fmt.Sprintf("%s-%d.json", p.Server, p.Seq)), body, 0o644)
	}
	w.WriteHeader(http.StatusOK)
}

func lastElem(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// Posts returns a copy of everything received so far, in arrival order.
func (r *Recorder) Posts() []Post {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Post(nil), r.posts...)
}

// Changed returns a channel closed at the next POST.
func (r *Recorder) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	r.subs = append(r.subs, ch)
	return ch
}

// Event is the subset of an audit.k8s.io/v1 Event the harness looks at; Raw
// keeps the event exactly as sent.
type Event struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	SourceIPs []string `json:"sourceIPs"`
	ObjectRef *struct {
		Resource   string `json:"resource"`
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
		APIGroup   string `json:"apiGroup"`
		APIVersion string `json:"apiVersion"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp string `json:"requestReceivedTimestamp"`
	StageTimestamp           string `json:"stageTimestamp"`

	// Server is the apiserver whose webhook sent it; Post and Index locate it.
	Server string          `json:"-"`
	Post   int             `json:"-"`
	Index  int             `json:"-"`
	Raw    json.RawMessage `json:"-"`
}

// EventList is audit.k8s.io/v1 EventList with raw items.
type EventList struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion"`
	Metadata   map[string]any    `json:"metadata"`
	Items      []json.RawMessage `json:"items"`
}

// ParsePost decodes a webhook body into events.
func ParsePost(p Post) ([]Event, error) {
	var l EventList
	if err := json.Unmarshal(p.Body, &l); err != nil {
		return nil, fmt.Errorf("%s #%d: %w", p.Path, p.Seq, err)
	}
	out := make([]Event, 0, len(l.Items))
	for i, raw := range l.Items {
		var e Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("%s #%d item %d: %w", p.Path, p.Seq, i, err)
		}
		e.Server, e.Post, e.Index, e.Raw = p.Server, p.Seq, i, raw
		out = append(out, e)
	}
	return out, nil
}

// Events decodes every post received so far.
func (r *Recorder) Events() ([]Event, error) {
	var out []Event
	for _, p := range r.Posts() {
		evs, err := ParsePost(p)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, nil
}

// Close stops the listener.
func (r *Recorder) Close() error { return r.srv.Close() }
