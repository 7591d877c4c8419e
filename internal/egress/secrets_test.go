package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const secretValue = "sk-REAL-value-4f1c9e"

// secretHandler shows what arrived: the Authorization header, the Basic
// password, X-Other; and echoes Authorization in a response header.
func secretHandler(hits *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		_, pass, _ := r.BasicAuth()
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "auth=%s basic=%s other=%s", r.Header.Get("Authorization"), pass, r.Header.Get("X-Other"))
	}
}

// get sends a GET with headers through client and returns the body and the
// X-Echo header.
func get(t *testing.T, client *http.Client, url string, hdr map[string]string, basic string) (body, echo string, resp *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if basic != "" {
		req.SetBasicAuth("x-access-token", basic)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %q", url, resp.StatusCode, b)
	}
	return string(b), resp.Header.Get("X-Echo"), resp
}

// noValue fails if the secret value appears in any event.
func noValue(t *testing.T, h *harness) {
	t.Helper()
	for _, e := range h.events() {
		if s := fmt.Sprintf("%+v", e); strings.Contains(s, secretValue) {
			t.Errorf("event shows the secret value: %s", s)
		}
	}
}

func secretPolicy(t *testing.T, servers map[string]string, secretHost string) (*Policy, string) {
	pol := allowPolicy(t, servers)
	ph := NewPlaceholder()
	pol.Secrets = []Secret{{Env: "API_KEY", Placeholder: ph, Value: secretValue, Hosts: []Rule{{secretHost, 0}}}}
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	return pol, ph
}

func TestSecretsPlainHTTP(t *testing.T) {
	api := httptest.NewServer(secretHandler(nil))
	defer api.Close()
	other := httptest.NewServer(secretHandler(nil))
	defer other.Close()
	pol, ph := secretPolicy(t, map[string]string{"api.test": api.URL, "other.test": other.URL}, "api.test")
	h := newHarness(t, pol, hopts{})
	client, _ := h.client(nil)
	hdr := map[string]string{"Authorization": "Bearer " + ph, "X-Other": "a " + ph + " b"}

	body, echo, _ := get(t, client, hostURL(t, api.URL, "api.test", "/"), hdr, "")
	if want := "auth=Bearer " + secretValue + " basic= other=a " + secretValue + " b"; body != want {
		t.Errorf("secret host got %q, want %q", body, want)
	}
	if echo != "Bearer "+ph {
		t.Errorf("X-Echo reached the box as %q, want the placeholder", echo)
	}
	body, _, _ = get(t, client, hostURL(t, api.URL, "api.test", "/"), nil, ph)
	if want := "auth=Basic " + basicOf(secretValue) + " basic=" + secretValue + " other="; body != want {
		t.Errorf("Basic credentials: got %q, want %q", body, want)
	}

	body, echo, _ = get(t, client, hostURL(t, other.URL, "other.test", "/"), hdr, "")
	if want := "auth=Bearer " + ph + " basic= other=a " + ph + " b"; body != want || echo != "Bearer "+ph {
		t.Errorf("other host got %q (echo %q), want the placeholder only", body, echo)
	}

	h.waitEvent(func(e Event) bool { return e.Host == "other.test" }) // emitted after the response
	evs := h.events()
	if len(evs) != 3 || fmt.Sprint(evs[0].Secrets) != "[API_KEY]" || fmt.Sprint(evs[1].Secrets) != "[API_KEY]" || len(evs[2].Secrets) != 0 {
		t.Errorf("events %+v", evs)
	}
	noValue(t, h)
}

func basicOf(pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth("x-access-token", pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func TestSecretsHTTPSIntercepted(t *testing.T) {
	k := newPKI(t)
	var apiHits atomic.Int64
	api := k.tlsServer(t, "api.test", secretHandler(&apiHits))
	other := k.tlsServer(t, "other.test", secretHandler(nil))
	pol, ph := secretPolicy(t, map[string]string{"api.test": api.URL, "other.test": other.URL}, "api.test")
	proxyCA, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, pol, hopts{opts: Options{CA: proxyCA, UpstreamRoots: k.ca.Pool(), Log: log}})
	defer func() {
		h.box.Close()
		if strings.Contains(logs.String(), secretValue) {
			t.Errorf("the log shows the secret value:\n%s", logs.String())
		}
		if !strings.Contains(logs.String(), "api.test") {
			t.Errorf("the debug log says nothing of api.test:\n%s", logs.String())
		}
	}()
	// The box trusts moat's CA (CertPEM) and, for the passthrough host, the
	// test servers' CA.
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(proxyCA.CertPEM()) {
		t.Fatal("CertPEM does not parse")
	}
	roots.AddCert(k.ca.cert)
	client, tr := h.client(roots)
	hdr := map[string]string{"Authorization": "Bearer " + ph}

	for i := range 2 { // two requests in one tunnel
		body, echo, resp := get(t, client, hostURL(t, api.URL, "api.test", "/"), hdr, "")
		if want := "auth=Bearer " + secretValue + " basic= other="; body != want {
			t.Errorf("request %d: secret host got %q, want %q", i, body, want)
		}
		if echo != "Bearer "+ph {
			t.Errorf("X-Echo reached the box as %q", echo)
		}
		// The box saw moat's certificate, not the server's.
		leaf := resp.TLS.PeerCertificates[0]
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: proxyCA.Pool(), DNSName: "api.test"}); err != nil {
			t.Errorf("the box's certificate is not moat's: %v", err)
		}
		if resp.TLS.NegotiatedProtocol == "h2" {
			t.Error("HTTP/2 negotiated")
		}
	}
	body, _, resp := get(t, client, hostURL(t, other.URL, "other.test", "/"), hdr, "")
	if want := "auth=Bearer " + ph + " basic= other="; body != want {
		t.Errorf("other host got %q, want the placeholder", body)
	}
	if !resp.TLS.PeerCertificates[0].Equal(other.TLS.Certificates[0].Leaf) {
		t.Error("the tunnel to other.test was intercepted")
	}
	tr.CloseIdleConnections()
	e := h.waitEvent(func(e Event) bool { return e.Kind == "connect" && e.Host == "api.test" })
	if !e.Allowed || fmt.Sprint(e.Secrets) != "[API_KEY]" || e.BytesIn == 0 {
		t.Errorf("connect event %+v", e)
	}
	h.waitEvent(func(e Event) bool { return e.Kind == "connect" && e.Host == "other.test" })
	var https int
	for _, e := range h.events() {
		if e.Kind == "http" && e.Host == "api.test" {
			https++
			if !e.Allowed || fmt.Sprint(e.Secrets) != "[API_KEY]" || e.BytesOut == 0 {
				t.Errorf("http event %+v", e)
			}
		}
	}
	if https != 2 || apiHits.Load() != 2 {
		t.Errorf("%d http events, %d requests at the server; want 2", https, apiHits.Load())
	}
	noValue(t, h)
}

// TestSecretsHTTPSWithoutCA: without a CA, HTTPS to a secret's host passes
// through and the placeholder stays a placeholder.
func TestSecretsHTTPSWithoutCA(t *testing.T) {
	k := newPKI(t)
	api := k.tlsServer(t, "api.test", secretHandler(nil))
	pol, ph := secretPolicy(t, map[string]string{"api.test": api.URL}, "api.test")
	h := newHarness(t, pol, hopts{})
	client, _ := h.client(k.ca.Pool())
	body, _, _ := get(t, client, hostURL(t, api.URL, "api.test", "/"), map[string]string{"Authorization": "Bearer " + ph}, "")
	if want := "auth=Bearer " + ph + " basic= other="; body != want {
		t.Errorf("got %q, want %q", body, want)
	}
}

// interceptedConn opens an intercepted tunnel to api.test and returns the
// box's side of its TLS.
func interceptedConn(t *testing.T, h *harness, target string, roots *x509.CertPool) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c := connectTunnel(t, h, target)
	tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: roots})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc, bufio.NewReader(tc)
}

// TestInterceptHostMismatch: inside an intercepted tunnel, a request for
// another host is refused and never reaches the server.
func TestInterceptHostMismatch(t *testing.T) {
	k := newPKI(t)
	var hits atomic.Int64
	api := k.tlsServer(t, "api.test", secretHandler(&hits))
	pol, ph := secretPolicy(t, map[string]string{"api.test": api.URL}, "api.test")
	proxyCA, _ := NewCA()
	h := newHarness(t, pol, hopts{opts: Options{CA: proxyCA, UpstreamRoots: k.ca.Pool()}})
	target := fmt.Sprintf("api.test:%d", port(t, api.URL))

	tc, br := interceptedConn(t, h, target, proxyCA.Pool())
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: evil.test\r\nAuthorization: Bearer %s\r\n\r\n", ph)
	resp, body := readResp(t, br, "GET")
	want := fmt.Sprintf("moat: egress to %s refused: Host header names \"evil.test\" but the tunnel is to %s\n", target, target)
	if resp.StatusCode != 403 || body != want {
		t.Fatalf("got %d %q, want %q", resp.StatusCode, body, want)
	}
	if hits.Load() != 0 {
		t.Error("the request reached the server")
	}
	noValue(t, h)
}

// TestInterceptVerifiesUpstream: the proxy verifies the server when it
// intercepts; a server the roots do not vouch for gets a 502, not the secret.
func TestInterceptVerifiesUpstream(t *testing.T) {
	k := newPKI(t)
	var hits atomic.Int64
	api := k.tlsServer(t, "api.test", secretHandler(&hits))
	pol, ph := secretPolicy(t, map[string]string{"api.test": api.URL}, "api.test")
	proxyCA, _ := NewCA()
	stranger := newPKI(t)
	h := newHarness(t, pol, hopts{opts: Options{CA: proxyCA, UpstreamRoots: stranger.ca.Pool()}})
	target := fmt.Sprintf("api.test:%d", port(t, api.URL))

	tc, br := interceptedConn(t, h, target, proxyCA.Pool())
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n", ph)
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 502 || !strings.Contains(body, "TLS handshake with the server") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if hits.Load() != 0 {
		t.Error("the request reached the server")
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
