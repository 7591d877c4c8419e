package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"
	"time"
)

func TestCA(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatal("CertPEM is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if !cert.IsCA || cert.Subject.CommonName != "moat egress CA" ||
		cert.NotBefore.After(now.Add(-23*time.Hour)) || cert.NotAfter.Before(now.Add(364*24*time.Hour)) {
		t.Errorf("CA certificate: CA %v, name %q, valid %v to %v", cert.IsCA, cert.Subject.CommonName, cert.NotBefore, cert.NotAfter)
	}
	if k, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key %T, want ECDSA P-256", cert.PublicKey)
	}

	for _, host := range []string{"api.test", "127.0.0.1", "::1"} {
		leaf, err := ca.leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		opts := x509.VerifyOptions{Roots: ca.Pool(), DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := leaf.Leaf.Verify(opts); err != nil {
			t.Errorf("leaf for %s: %v", host, err)
		}
		if again, _ := ca.leaf(host); again != leaf {
			t.Errorf("leaf for %s was not cached", host)
		}
	}
	other, _ := NewCA()
	leaf, _ := ca.leaf("api.test")
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: other.Pool(), DNSName: "api.test"}); err == nil {
		t.Error("a leaf verifies under another CA")
	}
}

func TestCALeafCacheBounded(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxLeaves + 10 {
		if _, err := ca.leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	ca.mu.Lock()
	n := len(ca.leaves)
	ca.mu.Unlock()
	if n > maxLeaves {
		t.Errorf("%d cached leaves, want at most %d", n, maxLeaves)
	}
}
