package ingest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ServerTLS returns the receiver's TLS configuration. The serving certificate is re-read when
// its files change (checked at most every reloadEvery), so a rotated certificate (cert-manager)
// takes effect without a restart. With clientCAFiles (the apiservers' CA and the readers' CA),
// a client certificate is verified against all of them when presented; which one it chains to,
// and so what it may do, is the Authenticator's decision, and whether one is required is the
// receiver's and the read endpoints' (a bearer token may stand in for it). Empty names are
// skipped.
func ServerTLS(certFile, keyFile string, clientCAFiles ...string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both --tls-cert-file and --tls-key-file (or --insecure-http on loopback)")
	}
	kp := &keypair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
	}
	pool := x509.NewCertPool()
	n := 0
	for _, f := range clientCAFiles {
		if f == "" {
			continue
		}
		cas, err := LoadCAs(f)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		for _, c := range cas {
			pool.AddCert(c)
			n++
		}
	}
	if n > 0 {
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

const reloadEvery = 10 * time.Second

type keypair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time
	checked time.Time
}

func (k *keypair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cert != nil && time.Since(k.checked) < reloadEvery {
		return k.cert, nil
	}
	k.checked = time.Now()
	mod := latestModTime(k.certFile, k.keyFile)
	if k.cert != nil && !mod.After(k.modTime) {
		return k.cert, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			// Mid-rotation the pair can be briefly inconsistent: keep serving the old one.
			return k.cert, nil
		}
		return nil, fmt.Errorf("load TLS key pair: %w", err)
	}
	k.cert, k.modTime = &c, mod
	return k.cert, nil
}

func latestModTime(files ...string) time.Time {
	var t time.Time
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.ModTime().After(t) {
			t = st.ModTime()
		}
	}
	return t
}
