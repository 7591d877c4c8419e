package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"time"
)

// CA is moat's certificate authority for TLS interception. It lives in memory
// only: its key is made by NewCA and never written anywhere. Boxes trust its
// certificate (CertPEM) so that the proxy can terminate their TLS to hosts that
// have secrets, substitute the placeholders and forward the requests.
//
// The CA issues leaf certificates on demand, one per host, and caches them. A
// CA is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	// leafKey is shared by every leaf: a fresh key per host buys nothing here
	// (the CA key signs them all) and costs a key generation per host.
	leafKey *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // +checklocks:mu
}

// maxLeaves bounds the leaf cache; a box naming many hosts only evicts entries.
const maxLeaves = 1024

// caValidity is how long the CA certificate is valid; a moat server that runs
// longer makes a new CA at restart (it must then give boxes the new CertPEM).
const caValidity = 365 * 24 * time.Hour

// NewCA makes a new CA: an ECDSA P-256 key and a self-signed certificate named
// "moat egress CA", valid from 24 hours ago (clock skew) to one year from now.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate leaf key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "moat egress CA", Organization: []string{"moat"}},
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leafKey: leafKey,
		leaves:  map[string]*tls.Certificate{},
	}, nil
}

// CertPEM returns the CA certificate in PEM form: what a box must trust.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Pool returns a new pool holding the CA certificate, for clients in tests and
// tools that trust the box's view of the world.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// leaf returns a certificate for host (canonical: a DNS name or an IP literal),
// from the cache when it has one that is valid for another hour at least.
func (c *CA) leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && now.Add(time.Hour).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	l, err := c.issue(host, now)
	if err != nil {
		return nil, err
	}
	if len(c.leaves) >= maxLeaves {
		for k := range c.leaves { // evict one arbitrary entry
			delete(c.leaves, k)
			break
		}
	}
	c.leaves[host] = l
	return l, nil
}

// issue signs a leaf certificate for host, valid for a day (never past the CA).
func (c *CA) issue(host string, now time.Time) (*tls.Certificate, error) {
	notAfter := now.Add(24 * time.Hour)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate for %s: %w", host, err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, c.cert.Raw},
		PrivateKey:  c.leafKey,
		Leaf:        leaf,
	}, nil
}

// randomSerial returns a random 128-bit serial number.
func randomSerial() *big.Int {
	var b [16]byte
	rand.Read(b[:])
	b[0] &= 0x7f // positive
	return new(big.Int).SetBytes(b[:])
}
