package storetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
)

// Real captures: test/testdata/real/<scenario>/ holds the audit webhook POST bodies real
// kube-apiservers (v1.35.4 and v1.36.3, Mixed Version Proxy on) sent in each scenario, and
// labels.json saying what each request of interest was (see test/e2e/capture_test.go).
// LoadCaptures turns them into records, exactly as the receiver would, and into the chains the
// labels say the correlator must find.

// RealDir is where the captures live, relative to the repository root.
const RealDir = "test/testdata/real"

type labelsFile struct {
	Scenario    string            `json:"scenario"`
	Description string            `json:"description"`
	Versions    map[string]string `json:"versions"`
	Posts       []struct {
		File      string    `json:"file"`
		APIServer string    `json:"apiserver"`
		Received  time.Time `json:"received"`
	} `json:"posts"`
	Requests []Label `json:"requests"`
}

// Label is one labelled request of a capture.
type Label struct {
	Scenario         string   `json:"-"`
	AuditID          string   `json:"auditID"`
	Expect           string   `json:"expect"`
	Entry            string   `json:"entry"`
	Peer             string   `json:"peer"`
	Verb             string   `json:"verb"`
	Resource         string   `json:"resource"`
	Path             string   `json:"path"`
	User             string   `json:"user"`
	ImpersonatedUser string   `json:"impersonatedUser"`
	Code             int32    `json:"code"`
	ObservedOn       []string `json:"observedOn"`
	Note             string   `json:"note"`
}

// Capture is every real scenario together.
type Capture struct {
	Scenario
	Labels []Label
	// Scenarios names the scenarios loaded, with their descriptions.
	Scenarios map[string]string
}

// classOf maps a label's expectation to the chain class the correlator must give it.
func classOf(l Label, sides int) (chain.Class, []chain.Finding) {
	switch l.Expect {
	case "proxied":
		return chain.ClassProxied, nil
	case "local", "denied", "local_404":
		return chain.ClassLocal, nil
	case "misleading_404":
		return chain.ClassMisleading404, nil
	case "peer_unreachable":
		return chain.ClassProxyFailed, nil
	case "peer_discovery":
		return chain.ClassInternal, nil
	case "proxied_peer_killed":
		if sides == 2 {
			return chain.ClassProxied, nil
		}
		return chain.ClassBroken, []chain.Finding{chain.FindingPeerAuditMissing}
	}
	return chain.ClassLocal, nil
}

// LoadCaptures reads every scenario under dir (RealDir from the repository root). It fails
// when dir holds none.
func LoadCaptures(dir string) (*Capture, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*", "labels.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no captures (*/labels.json) under %s", dir)
	}
	sort.Strings(files)
	c := &Capture{Scenario: Scenario{Expect: map[string][]string{}}, Scenarios: map[string]string{}}
	byID := map[string][]record.Record{}
	labels := map[string]Label{}
	for _, f := range files {
		var lf labelsFile
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &lf); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		c.Scenarios[lf.Scenario] = lf.Description
		for _, p := range lf.Posts {
			body, err := os.ReadFile(filepath.Join(filepath.Dir(f), p.File))
			if err != nil {
				return nil, err
			}
			recs, invalid, err := record.Decode(body, p.APIServer, p.Received)
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", lf.Scenario, p.File, err)
			}
			if len(invalid) > 0 {
				return nil, fmt.Errorf("%s/%s: invalid event: %s", lf.Scenario, p.File, invalid[0].Reason)
			}
			c.Posts = append(c.Posts, Post{APIServer: p.APIServer, ReceivedAt: p.Received, Body: body})
			c.Records = append(c.Records, recs...)
			for _, r := range recs {
				byID[r.AuditID] = append(byID[r.AuditID], r)
			}
		}
		for _, l := range lf.Requests {
			l.Scenario = lf.Scenario
			c.Labels = append(c.Labels, l)
			labels[l.AuditID] = l
			c.Expect["label:"+l.Expect] = append(c.Expect["label:"+l.Expect], l.AuditID)
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ch := chainOf(byID[id], labels[id])
		c.Chains = append(c.Chains, ch)
		c.Expect[string(ch.Class)] = append(c.Expect[string(ch.Class)], id)
		for _, f := range ch.Findings {
			c.Expect["finding:"+string(f)] = append(c.Expect["finding:"+string(f)], id)
		}
	}
	sort.Slice(c.Chains, func(i, j int) bool { return c.Chains[i].FirstReceived.Before(c.Chains[j].FirstReceived) })
	return c, nil
}

// chainOf assembles the chain of one auditID's records. A label, when there is one, names the
// entry and peer and the class; otherwise the records decide: one apiserver is a local request,
// two a forwarding whose peer is the one that saw the entry's address appended to sourceIPs.
func chainOf(recs []record.Record, l Label) chain.Chain {
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].StageTimestamp.Before(recs[j].StageTimestamp) })
	sides := map[string]*chain.Side{}
	var order []string
	for _, r := range recs {
		s, ok := sides[r.APIServer]
		if !ok {
			s = &chain.Side{APIServer: r.APIServer, User: r.UserName, UID: r.UserUID, Groups: r.UserGroups, Extra: r.UserExtra,
				ImpersonatedUser: r.ImpersonatedUser, ImpersonatedGroups: r.ImpersonatedGroups, ImpersonatedExtra: r.ImpersonatedExtra, SourceIPs: r.SourceIPs,
				UserAgent: r.UserAgent, RequestReceived: r.RequestReceivedTimestamp}
			sides[r.APIServer] = s
			order = append(order, r.APIServer)
		}
		// The RequestReceived event precedes impersonation in the apiserver's filter chain:
		// only the later stages name the impersonated user (seen in the captures).
		if s.ImpersonatedUser == "" && r.ImpersonatedUser != "" {
			s.ImpersonatedUser, s.ImpersonatedGroups, s.ImpersonatedExtra = r.ImpersonatedUser, r.ImpersonatedGroups, r.ImpersonatedExtra
		}
		s.Stages = append(s.Stages, r.Stage)
		s.Completed = r.StageTimestamp
		s.HasObjects = s.HasObjects || r.HasRequestObject || r.HasResponseObject
		if r.Code != 0 {
			s.Code, s.Message, s.Reason = r.Code, r.Message, r.Reason
		}
	}
	entryName, peerName := l.Entry, l.Peer
	if l.AuditID == "" || (entryName == "" && l.Expect != "peer_discovery") {
		entryName = order[0]
		if len(order) == 2 {
			a, b := sides[order[0]], sides[order[1]]
			if len(a.SourceIPs) > len(b.SourceIPs) {
				a, b = b, a
			}
			entryName, peerName = a.APIServer, b.APIServer
		}
	}
	if l.Expect == "peer_discovery" {
		peerName = order[0]
	}
	entry, peer := sides[entryName], sides[peerName]
	class, findings := classOf(l, len(sides))
	if l.AuditID == "" {
		class = chain.ClassLocal
		if len(sides) == 2 {
			class = chain.ClassProxied
		}
	}
	first := recs[0]
	c := chain.Chain{
		AuditID:  first.AuditID,
		State:    chain.StateFinal,
		Class:    class,
		Findings: findings,
		Entry:    entry,
		Peer:     peer,
		Verb:     first.Verb, RequestURI: first.RequestURI,
		Group: first.Group, Version: first.Version, Resource: first.Resource, Subresource: first.Subresource,
		Namespace: first.Namespace, Name: first.Name,
		User:     first.UserName,
		Records:  len(recs),
		Revision: 1,
	}
	if l.Note != "" {
		c.Explanation = l.Expect + ": " + l.Note
	} else if l.Expect != "" {
		c.Explanation = l.Expect
	}
	head := entry
	if head == nil {
		head = peer
	}
	c.Code = head.Code
	c.ID = fmt.Sprintf("%s/%s/%d", c.AuditID, head.APIServer, head.RequestReceived.UnixMicro())
	if entry != nil {
		c.EntryDurationSeconds = entry.Duration().Seconds()
		if entry.ImpersonatedUser != "" {
			c.User, c.RealUser = entry.ImpersonatedUser, entry.User
		}
	}
	if peer != nil {
		c.PeerDurationSeconds = peer.Duration().Seconds()
	}
	if entry != nil && peer != nil {
		c.ForwardingOverheadSeconds = c.EntryDurationSeconds - c.PeerDurationSeconds
		if entry.ImpersonatedUser != "" && peer.ImpersonatedUser == "" {
			c.Findings = append(c.Findings, chain.FindingImpersonationFlattened)
		}
		if entry.User == peer.User && entry.UID != peer.UID {
			c.Findings = append(c.Findings, chain.FindingIdentityMismatch)
		}
	}
	for _, r := range recs {
		if c.FirstReceived.IsZero() || r.ReceivedAt.Before(c.FirstReceived) {
			c.FirstReceived = r.ReceivedAt
		}
		if r.ReceivedAt.After(c.LastReceived) {
			c.LastReceived = r.ReceivedAt
		}
	}
	return c
}
