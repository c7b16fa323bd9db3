package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClient(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "c"}, NotBefore: time.Unix(0, 0), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crt, kf, bad := filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"), filepath.Join(dir, "bad")
	os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	os.WriteFile(bad, []byte("not pem"), 0o600)

	tc, err := Client(crt, false, crt, kf)
	if err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.InsecureSkipVerify {
		t.Fatalf("CA and key pair: %+v %v", tc, err)
	}
	if tc, err := Client("", true, "", ""); err != nil || tc.RootCAs != nil || !tc.InsecureSkipVerify {
		t.Fatalf("insecure: %+v %v", tc, err)
	}
	if _, err := Client(bad, false, "", ""); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a CA file without PEM: %v", err)
	}
	if _, err := Client("", false, crt, bad); err == nil || !strings.Contains(err.Error(), crt) {
		t.Errorf("a bad key: %v", err)
	}
}
