// Package promqlcheck checks peertrail's PromQL with Prometheus' own parser: every expression
// of the generated rules (alerts/generated) and dashboards (dashboards/generated) must parse, and
// name only metrics that peertrail or the kube-apiservers export (package metrics), plus the
// recording rules the rule file itself defines, with only label names package metrics spells.
//
// It lives in its own module (tools/) so that Prometheus and its hundred dependencies stay out
// of peertrail's go.mod. Run it with `cd tools && go test ./...`.
package promqlcheck
