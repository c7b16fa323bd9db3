// Package record turns the audit.k8s.io/v1 EventLists that kube-apiservers post into flat
// records, one per audit event, and encodes batches of them as spool frames.
//
// A Record is the unit every later stage works on: correlate joins records into chains, store
// writes them as rows. It carries every field a forwarding chain is judged by, plus the raw
// event exactly as the apiserver sent it, so nothing is lost for later investigation.
package record

import (
	"encoding/binary"
	"time"

	"github.com/zeebo/xxh3"
)

// Record is one audit event as received from one apiserver, normalised. Records are values:
// once decoded they are never modified, and slices and maps inside are not shared with others.
type Record struct {
	// APIServer is the name of the apiserver that sent the event (from the webhook path or
	// the client certificate), not anything the event says about itself.
	APIServer string `json:"apiserver"`
	AuditID   string `json:"audit_id"`
	Stage     string `json:"stage"`
	Level     string `json:"level"`
	Verb      string `json:"verb"`

	RequestURI  string `json:"request_uri"`
	Group       string `json:"group"`
	Version     string `json:"version"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`

	UserName   string              `json:"user"`
	UserUID    string              `json:"user_uid,omitempty"`
	UserGroups []string            `json:"user_groups,omitempty"`
	UserExtra  map[string][]string `json:"user_extra,omitempty"`

	ImpersonatedUser   string              `json:"impersonated_user,omitempty"`
	ImpersonatedUID    string              `json:"impersonated_uid,omitempty"`
	ImpersonatedGroups []string            `json:"impersonated_groups,omitempty"`
	ImpersonatedExtra  map[string][]string `json:"impersonated_extra,omitempty"`
	// ImpersonationConstraint is authenticationMetadata.impersonationConstraint (constrained
	// impersonation, 1.35+).
	ImpersonationConstraint string `json:"impersonation_constraint,omitempty"`

	SourceIPs []string `json:"source_ips"`
	UserAgent string   `json:"user_agent"`

	// Code is responseStatus.code; 0 when the stage has no response yet (RequestReceived).
	Code    int32  `json:"code"`
	Status  string `json:"status,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`

	RequestReceivedTimestamp time.Time `json:"request_received_timestamp"`
	StageTimestamp           time.Time `json:"stage_timestamp"`

	Annotations map[string]string `json:"annotations,omitempty"`

	HasRequestObject    bool  `json:"has_request_object"`
	RequestObjectBytes  int64 `json:"request_object_bytes"`
	HasResponseObject   bool  `json:"has_response_object"`
	ResponseObjectBytes int64 `json:"response_object_bytes"`

	// ReceivedAt is when peertrail received the batch that carried this event.
	ReceivedAt time.Time `json:"received_at"`

	// Raw is the event's JSON exactly as it appeared in the EventList, unknown fields included,
	// unless its resource's objects are redacted (Redaction): then it is the event without
	// requestObject and responseObject, and with RedactedAnnotation, which Annotations has too.
	Raw []byte `json:"-"`
}

// Key identifies one audit event for duplicate detection. The apiserver retries whole batches,
// and a client may reuse an Audit-ID across requests, so the auditID alone is not enough: an
// event is the same only if the same apiserver reported the same stage of it at the same instant.
type Key [16]byte

// KeyOf returns the key of (apiserver, auditID, stage, stageTimestamp). The timestamp counts
// in microseconds, the precision apiservers write (metav1.MicroTime).
func KeyOf(apiserver, auditID, stage string, stageTimestamp time.Time) Key {
	// On the stack unless the fields are unusually long: one key per event, 10k a second.
	var stack [160]byte
	b := stack[:0]
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	b = binary.AppendUvarint(b, uint64(len(apiserver)))
	b = append(b, apiserver...)
	b = binary.AppendUvarint(b, uint64(len(auditID)))
	b = append(b, auditID...)
	b = binary.AppendUvarint(b, uint64(len(stage)))
	b = append(b, stage...)
	b = binary.BigEndian.AppendUint64(b, uint64(stageTimestamp.UnixMicro()))
	return Key(xxh3.Hash128(b).Bytes())
}

// Key returns the record's duplicate-detection key.
func (r *Record) Key() Key {
	return KeyOf(r.APIServer, r.AuditID, r.Stage, r.StageTimestamp)
}

// KeyStamp is the Unix second of the event's stageTimestamp: records with equal Keys have equal
// stamps (the key holds the microsecond), and events received close in time close ones. The
// duplicate index uses it to choose where to look (dedup.Index.Filter).
func (r *Record) KeyStamp() int64 { return r.StageTimestamp.Unix() }

// ResourceRequest reports whether the request named an API resource (as opposed to a
// non-resource URL such as /api, /apis or /healthz).
func (r *Record) ResourceRequest() bool { return r.Resource != "" }
