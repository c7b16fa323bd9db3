// Package tlsconfig builds the TLS configuration of peertrail's clients (the CLI towards
// peertrail serve, the simulator towards the webhook, the store towards a ClickHouse server):
// one place that reads a CA bundle and a client key pair.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Client returns a client's TLS configuration: the server verified against the certificates
// of caFile (the system's roots when ""), or not at all when insecure (for test servers and
// demos only), and the client certificate of certFile and keyFile when certFile is set. Errors
// name the file.
func Client(caFile string, insecure bool, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // opt-in, for test servers
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
		}
	}
	if certFile != "" {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s and key %s: %w", certFile, keyFile, err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}
