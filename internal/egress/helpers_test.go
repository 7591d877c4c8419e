package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every test stays on loopback: the resolver knows only the names a test
// gives it, and the dialer refuses anything outside 127.0.0.0/8 and ::1, so a
// bug in the proxy or a test cannot reach another machine.

var loopback = netip.MustParseAddr("127.0.0.1")

// fakeResolve resolves the names of m and fails for every other name.
func fakeResolve(m map[string][]netip.Addr) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := m[host]; ok {
			return a, nil
		}
		return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
	}
}

// loopbackDial dials loopback addresses only.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("test dialer: %s is not loopback", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// harness is one attached box with its listener and recorded events.
type harness struct {
	t     testing.TB
	p     *Proxy
	box   *Box
	addr  string // the proxy's address
	dns   string // the DNS socket's address, if any
	mu    sync.Mutex
	evs   []Event
	evCh  chan Event
	onEvt func(Event)
}

// options for newHarness.
type hopts struct {
	opts    Options
	dns     bool
	shorten bool // short idle and hello timeouts
	onEvent func(Event)
}

func newHarness(t testing.TB, pol *Policy, o hopts) *harness {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var pc net.PacketConn
	h := &harness{t: t, addr: l.Addr().String(), evCh: make(chan Event, 1000), onEvt: o.onEvent}
	if o.dns {
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h.dns = pc.LocalAddr().String()
	}
	if o.opts.Resolve == nil {
		o.opts.Resolve = fakeResolve(nil)
	}
	if o.opts.Dial == nil {
		o.opts.Dial = loopbackDial
	}
	h.p = New(o.opts)
	if o.shorten {
		h.p.idleTimeout = 300 * time.Millisecond
		h.p.helloTimeout = 300 * time.Millisecond
	}
	h.box = h.p.Attach(pol, l, pc, h.record)
	t.Cleanup(func() { h.box.Close() })
	return h
}

func (h *harness) record(e Event) {
	if h.onEvt != nil {
		h.onEvt(e)
	}
	h.mu.Lock()
	h.evs = append(h.evs, e)
	h.mu.Unlock()
	select {
	case h.evCh <- e:
	default: // waitEvent also looks at h.evs
	}
}

// events returns the events so far.
func (h *harness) events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.evs...)
}

// waitEvent waits for an event that satisfies ok.
func (h *harness) waitEvent(ok func(Event) bool) Event {
	h.t.Helper()
	for _, e := range h.events() {
		if ok(e) {
			return e
		}
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-h.evCh:
			if ok(e) {
				return e
			}
		case <-timeout:
			h.t.Fatalf("no such event; have %+v", h.events())
			return Event{}
		}
	}
}

// client returns an HTTP client that uses the proxy for every request and
// trusts roots for TLS.
func (h *harness) client(roots *x509.CertPool) (*http.Client, *http.Transport) {
	u := &url.URL{Scheme: "http", Host: h.addr}
	tr := &http.Transport{
		Proxy:           http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr
}

// raw sends s on a new connection to the proxy and returns the connection and
// a reader of its answers.
func (h *harness) raw(s string) (net.Conn, *bufio.Reader) {
	h.t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, s); err != nil {
		h.t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// readResp reads one response and its body.
func readResp(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// port returns the port of a test server's URL or address.
func port(t testing.TB, addr string) uint16 {
	t.Helper()
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(n)
}

// testPKI is a CA for the test servers ("upstream"), separate from the proxy's.
type testPKI struct{ ca *CA }

func newPKI(t testing.TB) testPKI {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{ca}
}

// tlsServer starts an HTTPS server on 127.0.0.1 with a certificate for name.
func (k testPKI) tlsServer(t testing.TB, name string, h http.Handler) *httptest.Server {
	t.Helper()
	cert, err := k.ca.leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// allowPolicy allows each name on the port of its server, maps the names to
// 127.0.0.1 and allows 127.0.0.1 on those ports (the explicit IP:port rule
// that loopback needs).
func allowPolicy(t testing.TB, servers map[string]string) *Policy {
	t.Helper()
	pol := &Policy{Mode: ModeAllowlist, Hosts: map[string][]netip.Addr{}}
	for name, addr := range servers {
		p := port(t, addr)
		pol.Allow = append(pol.Allow, Rule{Host: name, Port: p}, Rule{Host: "127.0.0.1", Port: p})
		pol.Hosts[name] = []netip.Addr{loopback}
	}
	return pol
}

// hostURL rewrites a test server's URL to name the server by name.
func hostURL(t testing.TB, srvURL, name, path string) string {
	t.Helper()
	u, err := url.Parse(srvURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort(name, u.Port())
	return u.String() + path
}
