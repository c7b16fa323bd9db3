// Package harness is the end-to-end tests' name for internal/kubecluster: a real HA
// Kubernetes control plane on loopback (etcd and kube-apiservers of chosen versions, the Mixed
// Version Proxy on, audit webhooks pointed where the test says). The cluster itself lives in
// internal/kubecluster because `peertrail demo --real` runs one too, and the shipped binary
// must not link a test package; see that package for the documentation of each name.
package harness

import "github.com/peertrail/peertrail/internal/kubecluster"

// Versions of the 1.35 -> 1.36 upgrade under test, and the other constants.
const (
	OldVersion         = kubecluster.OldVersion
	NewVersion         = kubecluster.NewVersion
	DefaultAuditPolicy = kubecluster.DefaultAuditPolicy
	HarnessUserAgent   = kubecluster.HarnessUserAgent
	ProxyClientName    = kubecluster.ProxyClientName
)

// The types of the cluster.
type (
	TB            = kubecluster.TB
	CA            = kubecluster.CA
	Cluster       = kubecluster.Cluster
	Config        = kubecluster.Config
	Etcd          = kubecluster.Etcd
	Event         = kubecluster.Event
	EventList     = kubecluster.EventList
	KeyPair       = kubecluster.KeyPair
	PKI           = kubecluster.PKI
	Post          = kubecluster.Post
	Recorder      = kubecluster.Recorder
	Server        = kubecluster.Server
	ServerConfig  = kubecluster.ServerConfig
	Status        = kubecluster.Status
	WebhookConfig = kubecluster.WebhookConfig
)

// The functions of the cluster.
var (
	Binary           = kubecluster.Binary
	BinaryPath       = kubecluster.BinaryPath
	CacheDir         = kubecluster.CacheDir
	EtcdBinary       = kubecluster.EtcdBinary
	FreePort         = kubecluster.FreePort
	HTTPClient       = kubecluster.HTTPClient
	NewCA            = kubecluster.NewCA
	NewPKI           = kubecluster.NewPKI
	ParsePost        = kubecluster.ParsePost
	RenamedBinary    = kubecluster.RenamedBinary
	Start            = kubecluster.Start
	StartEtcd        = kubecluster.StartEtcd
	StartRecorder    = kubecluster.StartRecorder
	TempDir          = kubecluster.TempDir
	WithSourceIP     = kubecluster.WithSourceIP
	ErrMissingBinary = kubecluster.ErrMissingBinary
)
