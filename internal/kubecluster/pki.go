package kubecluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA is a certificate authority held in memory; it signs serving and client
// certificates and writes everything it issues as PEM files under Dir.
type CA struct {
	Name    string
	Cert    *x509.Certificate
	CertPEM []byte
	// CertFile is the PEM file of the CA certificate.
	CertFile string

	key crypto.Signer
	dir string

	mu     sync.Mutex
	serial int64
}

// KeyPair is an issued certificate with its key, both in memory and on disk.
type KeyPair struct {
	CertPEM  []byte
	KeyPEM   []byte
	CertFile string
	KeyFile  string
}

// TLSCertificate returns the pair as a tls.Certificate.
func (k *KeyPair) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(k.CertPEM, k.KeyPEM)
}

// NewCA creates a self-signed CA named name and writes <dir>/<name>.crt.
func NewCA(dir, name string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "peertrail-e2e-" + name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{
		Name:    name,
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		dir:     dir,
		serial:  1,
	}
	ca.CertFile = filepath.Join(dir, name+".crt")
	if err := os.WriteFile(ca.CertFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, nil
}

// Pool returns a cert pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// IssueServing issues a serving certificate for hosts (IP addresses become IP
// SANs, anything else DNS SANs) and writes <dir>/<file>.crt/.key.
func (ca *CA) IssueServing(file string, hosts ...string) (*KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(file, tmpl)
}

// IssueClient issues a client certificate for user (CN) in groups (O) and
// writes <dir>/<file>.crt/.key. Kubernetes maps CN to the user name and each O
// to a group.
func (ca *CA) IssueClient(file, user string, groups ...string) (*KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.issue(file, tmpl)
}

func (ca *CA) issue(file string, tmpl *x509.Certificate) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca.mu.Lock()
	ca.serial++
	tmpl.SerialNumber = big.NewInt(ca.serial)
	ca.mu.Unlock()
	now := time.Now()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(9 * 24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", file, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	kp := &KeyPair{
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CertFile: filepath.Join(ca.dir, file+".crt"),
		KeyFile:  filepath.Join(ca.dir, file+".key"),
	}
	if err := os.WriteFile(kp.CertFile, kp.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(kp.KeyFile, kp.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return kp, nil
}

// PKI is everything a control plane of this harness needs.
type PKI struct {
	Dir string
	// ServerCA signs the apiservers' serving certificates (and the audit
	// receiver's, if the caller wants). It is also --peer-ca-file.
	ServerCA *CA
	// ClientCA is --client-ca-file: admin and user client certificates.
	ClientCA *CA
	// FrontProxyCA is --requestheader-client-ca-file; it signs ProxyClient.
	FrontProxyCA *CA

	// Serving is the apiservers' serving cert (127.0.0.1, localhost).
	Serving *KeyPair
	// ProxyClient is the MVP / aggregator proxy client cert (CN front-proxy-client).
	ProxyClient *KeyPair
	// Admin is a client cert for user "admin" in group system:masters.
	Admin *KeyPair

	// ServiceAccountKeyFile / ServiceAccountPubFile: service-account signing pair.
	ServiceAccountKeyFile string
	ServiceAccountPubFile string
}

// ProxyClientName is the CN of the proxy client certificate and the value of
// --requestheader-allowed-names.
const ProxyClientName = "front-proxy-client"

// NewPKI generates a full set of CAs and certificates under dir.
func NewPKI(dir string) (*PKI, error) {
	p := &PKI{Dir: dir}
	var err error
	if p.ServerCA, err = NewCA(dir, "server-ca"); err != nil {
		return nil, err
	}
	if p.ClientCA, err = NewCA(dir, "client-ca"); err != nil {
		return nil, err
	}
	if p.FrontProxyCA, err = NewCA(dir, "front-proxy-ca"); err != nil {
		return nil, err
	}
	if p.Serving, err = p.ServerCA.IssueServing("apiserver", "127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"); err != nil {
		return nil, err
	}
	if p.ProxyClient, err = p.FrontProxyCA.IssueClient("front-proxy-client", ProxyClientName); err != nil {
		return nil, err
	}
	if p.Admin, err = p.ClientCA.IssueClient("admin", "admin", "system:masters"); err != nil {
		return nil, err
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p.ServiceAccountKeyFile = filepath.Join(dir, "sa.key")
	p.ServiceAccountPubFile = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.ServiceAccountKeyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.ServiceAccountPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// ClientCert issues a client certificate for user in groups, signed by the
// cluster's client CA (written to <dir>/user-<user>.crt/.key).
func (p *PKI) ClientCert(user string, groups ...string) (*KeyPair, error) {
	return p.ClientCA.IssueClient("user-"+sanitize(user), user, groups...)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}
