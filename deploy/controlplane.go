package deploy

import (
	"bytes"
	"fmt"
	"strings"
)

// Paths on a control-plane node that the kube-apiserver flags refer to. The defaults are
// kubeadm's: its PKI under /etc/kubernetes/pki, and peertrail's files (audit policy, webhook
// kubeconfig, the webhook's client certificate and peertrail's CA) in their own directory,
// mounted read-only into the kube-apiserver static pod.
type Paths struct {
	// PKIDir holds ca.crt (the CA of the apiservers' serving certificates), front-proxy-ca.crt
	// and front-proxy-client.crt/.key.
	PKIDir string
	// PeertrailDir holds audit-policy.yaml, audit-webhook.kubeconfig and what it refers to.
	PeertrailDir string
}

// DefaultPaths are kubeadm's.
var DefaultPaths = Paths{PKIDir: "/etc/kubernetes/pki", PeertrailDir: "/etc/kubernetes/peertrail"}

// Files in PeertrailDir.
const (
	AuditPolicyFile    = "audit-policy.yaml"
	WebhookKubeconfig  = "audit-webhook.kubeconfig"
	WebhookClientCert  = "audit-webhook-client.crt"
	WebhookClientKey   = "audit-webhook-client.key"
	PeertrailCAFile    = "peertrail-ca.crt"
	PeerAdvertiseIPVar = "${PEER_ADVERTISE_IP}"
)

// Flag is one kube-apiserver flag with the reason it is set.
type Flag struct {
	Name  string // without the leading dashes
	Value string
	// Group is the flag's section: "mvp" or "audit".
	Group string
	// Why is the explanation written next to the flag.
	Why string
	// PerNode flags differ between control-plane nodes (not in the cluster-wide kubeadm
	// ClusterConfiguration; kubeadm derives them from each node's advertise address).
	PerNode bool
	// KubeadmDefault flags are already set by kubeadm for the aggregation layer; the kubeadm
	// patch leaves them out, a hand-written static pod needs them.
	KubeadmDefault bool
}

// Arg is the flag as a command-line argument.
func (f Flag) Arg() string { return "--" + f.Name + "=" + f.Value }

// Audit webhook batching, shared by the flag lists and the e2e test that runs them.
const (
	// BatchMaxWait bounds how long an event waits in the apiserver before it is posted: it is
	// what a SIGKILLed apiserver loses, and the delay before peertrail can join a chain.
	BatchMaxWait = "1s"
	// BatchMaxSize: at the default throttle (10 batches/s) a batch of 1000 lets one apiserver
	// ship 10,000 events/s; a Metadata event is ~1.5 KiB, so a batch is ~1.5 MiB.
	BatchMaxSize = "1000"
)

// Versions are the kube-apiserver minors the control-plane files are written for.
var Versions = []string{"v1.35", "v1.36"}

// APIServerFlags returns the flags peertrail needs on a kube-apiserver of version (v1.35 or
// v1.36): the Mixed Version Proxy's and the audit webhook's.
func APIServerFlags(version string, p Paths) ([]Flag, error) {
	var gateWhy string
	switch version {
	case "v1.35":
		gateWhy = "MVP is alpha and off by default in 1.35: without the gate an old apiserver answers 404 for what only a 1.36 peer serves, and rejects --peer-ca-file and --peer-advertise-* at start."
	case "v1.36":
		gateWhy = "MVP is beta and on by default in 1.36; set explicitly so this list also starts a 1.35 apiserver (a rollback) and so turning it off is one visible edit."
	default:
		return nil, fmt.Errorf("deploy: no kube-apiserver flags for %q (want one of %s)", version, strings.Join(Versions, ", "))
	}
	pki := func(f string) string { return strings.TrimRight(p.PKIDir, "/") + "/" + f }
	pt := func(f string) string { return strings.TrimRight(p.PeertrailDir, "/") + "/" + f }
	return []Flag{
		{Group: "mvp", Name: "feature-gates", Value: "UnknownVersionInteroperabilityProxy=true", Why: gateWhy},
		{Group: "mvp", Name: "peer-ca-file", Value: pki("ca.crt"),
			Why: "CA that signed every apiserver's serving certificate; the entry verifies the peer with it. Without it nothing is proxied, even where the gate is on (1.36): \"on by default\" is not \"active\"."},
		{Group: "mvp", Name: "peer-advertise-ip", Value: PeerAdvertiseIPVar, PerNode: true,
			Why: "this apiserver's own address that peers dial (published in its peer endpoint lease); must be in its serving certificate. Unset (with --peer-advertise-port) it is --advertise-address, as on kubeadm nodes."},
		{Group: "mvp", Name: "peer-advertise-port", Value: "6443", PerNode: true,
			Why: "the port peers dial: this apiserver's --secure-port."},
		{Group: "mvp", Name: "proxy-client-cert-file", Value: pki("front-proxy-client.crt"), KubeadmDefault: true,
			Why: "client certificate the entry presents to the peer when it forwards; the peer trusts the X-Remote-User/-Group/-Extra headers only from it."},
		{Group: "mvp", Name: "proxy-client-key-file", Value: pki("front-proxy-client.key"), KubeadmDefault: true,
			Why: "its key."},
		{Group: "mvp", Name: "requestheader-client-ca-file", Value: pki("front-proxy-ca.crt"), KubeadmDefault: true,
			Why: "CA the peer verifies the proxy client certificate with."},
		{Group: "mvp", Name: "requestheader-allowed-names", Value: "front-proxy-client", KubeadmDefault: true,
			Why: "common name of the proxy client certificate; only it may assert a user in headers."},
		{Group: "mvp", Name: "requestheader-username-headers", Value: "X-Remote-User", KubeadmDefault: true,
			Why: "the header the entry puts the original user in."},
		{Group: "mvp", Name: "requestheader-group-headers", Value: "X-Remote-Group", KubeadmDefault: true,
			Why: "the original user's groups."},
		{Group: "mvp", Name: "requestheader-extra-headers-prefix", Value: "X-Remote-Extra-", KubeadmDefault: true,
			Why: "the original user's extra attributes."},
		{Group: "mvp", Name: "requestheader-uid-headers", Value: "X-Remote-Uid",
			Why: "the original user's UID (RemoteRequestHeaderUID, beta and on since 1.33): without it the peer's audit record lacks the UID the entry's has."},

		{Group: "audit", Name: "audit-policy-file", Value: pt(AuditPolicyFile),
			Why: "deploy/control-plane/audit-policy.yaml: Metadata for everything peertrail joins, no request or response bodies, health checks, events and node/leader-election leases dropped. It applies to every audit backend of this apiserver (a log backend too)."},
		{Group: "audit", Name: "audit-webhook-config-file", Value: pt(WebhookKubeconfig),
			Why: "written per apiserver by `peertrail deploy webhook-config --apiserver NAME`: posts to peertrail's /audit/NAME with this apiserver's own client certificate, because a webhook POST does not say which apiserver sent it."},
		{Group: "audit", Name: "audit-webhook-mode", Value: "batch",
			Why: "asynchronous: a slow or absent peertrail never slows or fails API requests (blocking and blocking-strict would)."},
		{Group: "audit", Name: "audit-webhook-batch-max-wait", Value: BatchMaxWait,
			Why: "default 30s. A batch leaves at the latest after this long: an apiserver killed with SIGKILL loses at most this much audit, and peertrail sees both halves of a forwarded request within about a second (its --chain-window of 30s covers it many times over)."},
		{Group: "audit", Name: "audit-webhook-batch-max-size", Value: BatchMaxSize,
			Why: "default 400. At the default throttle of 10 batches/s, 1000 events per batch carry 10,000 events/s per apiserver before the buffer (10,000 events) starts to fill; ~1.5 MiB per POST, far below peertrail's --max-body-bytes (32Mi)."},
		{Group: "audit", Name: "audit-webhook-truncate-enabled", Value: "true",
			Why: "an event over 100 KiB loses its request/response objects instead of failing its whole batch, and a batch over 10 MiB is split: peertrail never has to answer 413, which the webhook would retry and then drop."},
		{Group: "audit", Name: "audit-webhook-version", Value: "audit.k8s.io/v1",
			Why: "the version peertrail decodes (the default, pinned)."},
	}, nil
}

// StaticPodArgs renders the flags of version as a commented YAML list to merge into the
// kube-apiserver container's command of a static pod manifest (one node: replace
// ${PEER_ADVERTISE_IP}).
func StaticPodArgs(version string, p Paths) ([]byte, error) {
	flags, err := APIServerFlags(version, p)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Generated by `+"`peertrail deploy generate`"+` from deploy/controlplane.go. Do not edit.
#
# kube-apiserver %s: the flags peertrail needs, to add to the kube-apiserver container's
# command in its static pod manifest (/etc/kubernetes/manifests/kube-apiserver.yaml), on every
# control-plane node, one node at a time. Replace %s with the node's own address.
# Flags marked "kubeadm sets this" are already there on kubeadm nodes: keep one copy.
# The files under %s must be mounted into the pod (see deploy/README.md).
`, version, PeerAdvertiseIPVar, p.PeertrailDir)
	group := ""
	for _, f := range flags {
		if f.Group != group {
			group = f.Group
			title := map[string]string{"mvp": "Mixed Version Proxy", "audit": "Audit webhook to peertrail"}[group]
			fmt.Fprintf(&b, "\n# --- %s ---\n", title)
		}
		why := f.Why
		if f.KubeadmDefault {
			why = "(kubeadm sets this) " + why
		}
		writeComment(&b, why)
		fmt.Fprintf(&b, "- %s\n", f.Arg())
	}
	return b.Bytes(), nil
}

// KubeadmPatch renders the flags of version as a kubeadm v1beta4 ClusterConfiguration patch:
// apiServer.extraArgs (without the per-node flags, which kubeadm derives from each node's
// advertise address, and without the flags kubeadm already sets) and the extraVolume that
// mounts PeertrailDir.
func KubeadmPatch(version string, p Paths) ([]byte, error) {
	flags, err := APIServerFlags(version, p)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Generated by `+"`peertrail deploy generate`"+` from deploy/controlplane.go. Do not edit.
#
# kube-apiserver %s: what peertrail needs, as a kubeadm ClusterConfiguration patch. Merge
# apiServer.extraArgs and apiServer.extraVolumes into the cluster's ClusterConfiguration
# (kubectl -n kube-system edit configmap kubeadm-config), then regenerate each control-plane
# node's static pod, one node at a time (deploy/README.md). kubeadm already sets the proxy
# client certificate and the --requestheader-* flags for the aggregation layer, and
# --peer-advertise-ip/--peer-advertise-port default to each node's advertise address and port.
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
apiServer:
  extraArgs:
`, version)
	for _, f := range flags {
		if f.PerNode || f.KubeadmDefault {
			continue
		}
		writeIndentedComment(&b, "  ", f.Why)
		fmt.Fprintf(&b, "  - name: %s\n    value: %s\n", f.Name, yamlScalar(f.Value))
	}
	fmt.Fprintf(&b, `  extraVolumes:
  # peertrail's files on the node: audit policy, webhook kubeconfig, the webhook's client
  # certificate and key, and the CA of peertrail's serving certificate.
  - name: peertrail
    hostPath: %s
    mountPath: %s
    readOnly: true
    pathType: DirectoryOrCreate
`, p.PeertrailDir, p.PeertrailDir)
	return b.Bytes(), nil
}

func writeComment(b *bytes.Buffer, text string) { writeIndentedComment(b, "", text) }

// writeIndentedComment wraps text at ~96 columns as YAML comments.
func writeIndentedComment(b *bytes.Buffer, indent, text string) {
	line := indent + "#"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 96 && len(line) > len(indent)+1 {
			b.WriteString(line + "\n")
			line = indent + "#"
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
}

// yamlScalar quotes values YAML would not read back as the same string.
func yamlScalar(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "null", "~", "":
		return `"` + s + `"`
	}
	if strings.ContainsAny(s, ":#{}[],&*!|>'\"%@`") || strings.TrimLeft(s, "0123456789.") == "" {
		return `"` + s + `"`
	}
	return s
}
